//! The Debian package: `scripts/package.sh` packages this test's own binary, and
//! `dpkg-deb` opens the result. It holds the binary, which runs; the configuration, a
//! conffile that `serve` accepts; the sandboxed systemd unit (checked by
//! `systemd-analyze verify` where it is installed); a man page per command; and
//! bash, zsh and fish completions that complete.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs `command`, which must succeed; returns its stdout.
fn run(command: &mut Command) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        status.success(),
        "{command:?}: {status}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    String::from_utf8(stdout).expect("UTF-8 output")
}

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|out| out.status.success())
}

#[test]
fn the_debian_package_holds_a_working_installation() {
    let work = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/package.sh");
    let printed = run(Command::new("bash")
        .arg(&script)
        .args(["--binary", env!("CARGO_BIN_EXE_wirefold"), "--out-dir"])
        .arg(work.path())
        // Uncompressed: xz over a debug binary would add most of a minute to the
        // suite, and the compressor does not change what the package holds.
        .env("DPKG_DEB_COMPRESSOR_TYPE", "none"));
    let deb = PathBuf::from(printed.trim());
    let arch = run(Command::new("dpkg").arg("--print-architecture"));
    assert_eq!(
        deb.file_name().and_then(|n| n.to_str()),
        Some(format!("wirefold_{VERSION}_{}.deb", arch.trim()).as_str())
    );

    check_control(&deb, &work.path().join("control"));
    check_listing(&deb);
    let root = work.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root));
    check_binary_and_configuration(&root, work.path());
    check_man_pages(&root);
    check_completions(&root);
    check_unit(&root, work.path());
}

/// The control fields, the conffile, and maintainer scripts that `sh` can read.
fn check_control(deb: &Path, control: &Path) {
    let field = |name: &str| run(Command::new("dpkg-deb").arg("-f").arg(deb).arg(name));
    assert_eq!(field("Package").trim(), "wirefold");
    assert_eq!(field("Version").trim(), VERSION);
    let depends = field("Depends");
    assert!(depends.contains("libc6 (>= "), "Depends: {depends}");

    run(Command::new("dpkg-deb").arg("-e").arg(deb).arg(control));
    let conffiles = std::fs::read_to_string(control.join("conffiles")).unwrap();
    assert_eq!(conffiles, "/etc/wirefold/wirefold.toml\n");
    for script in ["postinst", "prerm", "postrm"] {
        run(Command::new("sh").arg("-n").arg(control.join(script)));
    }
    let md5sums = std::fs::read_to_string(control.join("md5sums")).unwrap();
    assert!(md5sums.contains("  usr/bin/wirefold\n"), "{md5sums}");
}

/// `dpkg-deb -c`: every file in its Debian place, owned by root, with its mode.
fn check_listing(deb: &Path) {
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(deb));
    // `-rw-r--r-- root/root 6265 2026-01-01 00:00 ./etc/wirefold/wirefold.toml`
    let entries: BTreeSet<(String, String, String)> = listing
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = fields[5].trim_start_matches('.').to_string();
            (path, fields[0].to_string(), fields[1].to_string())
        })
        .collect();
    for (path, mode) in [
        ("/usr/bin/wirefold", "-rwxr-xr-x"),
        ("/etc/wirefold/wirefold.toml", "-rw-r--r--"),
        ("/usr/lib/systemd/system/wirefold.service", "-rw-r--r--"),
        ("/usr/share/man/man1/wirefold.1.gz", "-rw-r--r--"),
        ("/usr/share/man/man1/wirefold-serve.1.gz", "-rw-r--r--"),
        (
            "/usr/share/bash-completion/completions/wirefold",
            "-rw-r--r--",
        ),
        ("/usr/share/zsh/vendor-completions/_wirefold", "-rw-r--r--"),
        (
            "/usr/share/fish/vendor_completions.d/wirefold.fish",
            "-rw-r--r--",
        ),
        ("/usr/share/doc/wirefold/copyright", "-rw-r--r--"),
    ] {
        let entry = (path.to_string(), mode.to_string(), "root/root".to_string());
        assert!(entries.contains(&entry), "no {entry:?} in\n{listing}");
    }
    let not_root: Vec<_> = entries.iter().filter(|e| e.2 != "root/root").collect();
    assert!(not_root.is_empty(), "{not_root:?}");
}

/// The packaged binary runs; `serve` accepts the packaged configuration once a mode
/// is chosen, and without one says which key to set (why the service is not
/// started on installation).
fn check_binary_and_configuration(root: &Path, work: &Path) {
    let binary = root.join("usr/bin/wirefold");
    let config = root.join("etc/wirefold/wirefold.toml");
    assert_eq!(
        run(Command::new(&binary).arg("--version")),
        format!("wirefold {VERSION}\n")
    );
    let served = work.join("www");
    std::fs::create_dir(&served).unwrap();
    let checked = run(Command::new(&binary)
        .args(["serve", "--check-config", "--config"])
        .arg(&config)
        .arg("--root")
        .arg(&served));
    assert_eq!(checked, "configuration is valid\n");
    let no_mode = Command::new(&binary)
        .args(["serve", "--check-config", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&no_mode.stderr);
    assert!(
        !no_mode.status.success() && err.contains("`origin`"),
        "{err}"
    );
}

/// A page per command listed by `wirefold --help`, and per nested command; each
/// gzipped troff for section 1 with its command's options.
fn check_man_pages(root: &Path) {
    let man1 = root.join("usr/share/man/man1");
    let page = |name: &str| run(Command::new("gzip").arg("-dc").arg(man1.join(name)));
    let help = run(Command::new(root.join("usr/bin/wirefold")).arg("--help"));
    let commands = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .map_while(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&command| command != "help");
    let mut names = vec!["wirefold".to_string()];
    names.extend(commands.map(|command| format!("wirefold-{command}")));
    names.extend(["wirefold-dict-train", "wirefold-lab-codecs"].map(String::from));
    assert!(names.len() > 6, "commands found in --help: {names:?}");
    for name in &names {
        let text = page(&format!("{name}.1.gz"));
        assert!(
            text.contains(&format!(".TH {name} 1 ")),
            "{name}.1.gz: {text}"
        );
    }
    let serve = page("wirefold-serve.1.gz");
    assert!(
        serve.contains("\\-\\-config") && serve.contains("\\-\\-origin"),
        "{serve}"
    );
}

/// Bash completes commands and options (the script is run); zsh and fish scripts
/// are for `wirefold`. None offers the hidden `generate`.
fn check_completions(root: &Path) {
    let bash = root.join("usr/share/bash-completion/completions/wirefold");
    // `_wirefold COMMAND WORD PREVIOUS`, as bash calls a completion function.
    let complete = |words: &str, word: &str, previous: &str| {
        let script = format!(
            "source \"$1\"; COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); \
             _wirefold wirefold '{word}' '{previous}'; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        run(Command::new("bash")
            .args(["-c", &script, "complete"])
            .arg(&bash))
    };
    assert_eq!(complete("wirefold se", "se", "wirefold"), "serve\n");
    assert_eq!(
        complete("wirefold serve --con", "--con", "serve"),
        "--config\n"
    );
    let first = complete("wirefold ''", "", "wirefold");
    assert!(
        first.lines().any(|c| c == "serve") && !first.lines().any(|c| c == "generate"),
        "{first}"
    );

    let zsh =
        std::fs::read_to_string(root.join("usr/share/zsh/vendor-completions/_wirefold")).unwrap();
    assert!(zsh.starts_with("#compdef wirefold\n"), "{zsh}");
    let fish =
        std::fs::read_to_string(root.join("usr/share/fish/vendor_completions.d/wirefold.fish"))
            .unwrap();
    assert!(fish.contains("complete -c wirefold "), "{fish}");
    for script in [&zsh, &fish] {
        assert!(!script.contains("generate "), "{script}");
    }
}

/// The unit runs `serve` with the packaged configuration under the sandbox, and
/// `systemd-analyze verify` accepts it (pointed at the extracted binary and man pages).
fn check_unit(root: &Path, work: &Path) {
    let unit =
        std::fs::read_to_string(root.join("usr/lib/systemd/system/wirefold.service")).unwrap();
    let lines: BTreeSet<&str> = unit.lines().collect();
    for required in [
        "ExecStart=/usr/bin/wirefold serve --config /etc/wirefold/wirefold.toml",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "DynamicUser=yes",
        "StateDirectory=wirefold",
        "WorkingDirectory=/var/lib/wirefold",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "SystemCallFilter=@system-service",
    ] {
        assert!(lines.contains(required), "no `{required}` in\n{unit}");
    }

    if !installed("systemd-analyze") {
        eprintln!(
            "SKIPPED: systemd-analyze verify (not installed; `apt-get install systemd` has it)"
        );
        return;
    }
    // verify checks that ExecStart's program exists: this copy names the extracted one.
    let copy = work.join("wirefold.service");
    let binary = root.join("usr/bin/wirefold");
    let binary = binary.to_str().expect("a UTF-8 temporary path");
    std::fs::write(&copy, unit.replace("/usr/bin/wirefold", binary)).unwrap();
    let mut verify = Command::new("systemd-analyze");
    verify.arg("verify");
    if installed("man") {
        // Documentation=man:wirefold-serve(1) must name a page the package holds.
        verify.env("MANPATH", root.join("usr/share/man"));
    } else {
        eprintln!("SKIPPED: the unit's man page reference (no `man` here to look it up)");
        verify.arg("--man=no");
    }
    let out = verify.arg(&copy).output().unwrap();
    // verify exits 0 and prints nothing for a unit it accepts.
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
