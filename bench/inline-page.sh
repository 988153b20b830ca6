# bench/inline-page.sh — the page and origin of the inline-download benchmarks
# (bench/inline.sh, bench/inline-pair.sh), sourced after bench/lib.sh.

# build_inline_page DIR CORPUS: the default page in DIR: the body of a 26 KB corpus
# page, 3 corpus stylesheets, 3 corpus scripts, a font, 3 images.
build_inline_page() {
  local dir=$1 corpus=$2
  mkdir -p "$dir"
  cp "$corpus/assets/whatwg__whatwg.org/resources-whatwg-org_standard-css/$(ls "$corpus/assets/whatwg__whatwg.org/resources-whatwg-org_standard-css" | tail -1)" "$dir/standard.css"
  cp "$corpus/assets/whatwg__whatwg.org/resources-whatwg-org_standard-shared-with-dev-css/$(ls "$corpus/assets/whatwg__whatwg.org/resources-whatwg-org_standard-shared-with-dev-css" | tail -1)" "$dir/shared.css"
  cp "$corpus/assets/google__styleguide/javaguide-css/$(ls "$corpus/assets/google__styleguide/javaguide-css" | tail -1)" "$dir/javaguide.css"
  # Three scripts of typical size (roleInfo.js, 432 KB, would make the bench measure
  # Chromium's parsing on two busy cores rather than the network).
  local aria="$corpus/assets/w3c__aria/common_script_aria-js"
  local refs="$corpus/assets/w3c__aria/common_script_resolveReferences-js"
  local pair
  for pair in "aria:$aria/$(ls "$aria" | tail -1)" "aria-old:$aria/$(ls "$aria" | head -1)" \
              "resolveReferences:$refs/$(ls "$refs" | tail -1)"; do
    # Wrapped so a script that expects its page's globals cannot stop the load.
    { echo "try {"; cat "${pair#*:}"; echo "} catch (e) {}"; } > "$dir/${pair%%:*}.js"
  done
  # Incompressible bytes stand in for a font and images (sizes of typical ones).
  head -c 40000 /dev/urandom > "$dir/font.woff2"
  local i
  for i in 1 2 3; do head -c 60000 /dev/urandom > "$dir/image$i.jpg"; done
  # A corpus page of typical size (rfc9412.html), its own scripts and styles left out.
  local body
  body=$(inline_page_body "$corpus/siblings/httpwg__httpwg.github.io/rfc9412.html")
  cat > "$dir/index.html" <<HTML
<!doctype html><html><head><meta charset=utf-8><title>page</title>
<link rel=stylesheet href=standard.css><link rel=stylesheet href=shared.css><link rel=stylesheet href=javaguide.css>
<link rel=preload as=font href=font.woff2 crossorigin>
<script src=aria.js></script><script src=aria-old.js></script><script src=resolveReferences.js></script>
</head>
<img src=image1.jpg width=300><img src=image2.jpg width=300><img src=image3.jpg width=300>
$body
</html>
HTML
}

# inline_page_body FILE: a corpus page's body without its own scripts, styles and images.
inline_page_body() {
  sed -n '/<body/,/<\/body>/p' "$1" \
    | sed -e 's/<script[^>]*src=[^>]*><\/script>//g' -e 's/<link[^>]*>//g' -e 's/<img[^>]*>//g'
}

# write_inline_origin FILE: the origin (python3 FILE ROOT PORT THINK_FILE): ROOT's
# files, assets with max-age=3600; every .html page no-cache, after THINK_FILE's
# milliseconds, with a script that writes `LOAD <loadEventEnd - startTime>` into its
# title (navigation timing, read back with chromium --dump-dom).
write_inline_origin() {
  cat > "$1" <<'PY'
import http.server, os, sys, time, urllib.parse
root, port, think_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
probe = (b"<script>addEventListener('load',()=>{setTimeout(()=>{const n=performance"
         b".getEntriesByType('navigation')[0];document.title='LOAD '+Math.round(n.loadEventEnd"
         b"-n.startTime)},0)})</script>")
def page_path(path):
    path = urllib.parse.urlparse(path).path
    return "index.html" if path == "/" else path.lstrip("/") if path.endswith(".html") else None
class H(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k): super().__init__(*a, directory=root, **k)
    def log_message(self, *a): pass
    def end_headers(self):
        # Pages are revalidated each time; their assets are static, as on most sites
        # (a preload answered no-cache would be fetched again when the page uses it).
        self.send_header("Cache-Control", "no-cache" if page_path(self.path) else "max-age=3600")
        super().end_headers()
    def do_GET(self):
        page = page_path(self.path)
        if page and os.path.isfile(os.path.join(root, page)):
            time.sleep(int(open(think_file).read() or 0) / 1000)
            body = open(os.path.join(root, page), "rb").read().replace(b"</html>", probe + b"</html>")
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            super().do_GET()
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
}
