//! `wirefold variants build DIR`: the variants of a `--root` site made ahead of
//! requests, so `serve` over the same store offers them from its first request.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod support;

use std::path::Path;
use std::process::Command;

use support::{serve, wirefold};

/// The response's header block (`-D -`) for `path` with `Save-Data: on` and
/// `accept`.
fn save_data_head(base: &str, path: &str, accept: &str) -> String {
    let out = Command::new("curl")
        .args(["-s", "-S", "--max-time", "20", "-o", "/dev/null", "-D", "-"])
        .args(["-H", "Save-Data: on", "-H", &format!("Accept: {accept}")])
        .arg(format!("{base}{path}"))
        .output()
        .expect("curl runs");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
}

fn site(root: &Path) {
    std::fs::create_dir_all(root.join("img")).unwrap();
    std::fs::write(
        root.join("img/photo.jpg"),
        fidelity::image::sample_photo_jpeg(480, 360, 0x2545_f491, 92).expect("a JPEG"),
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/assets/w3c__aria/common_script_aria-js/029.js");
    std::fs::copy(script, root.join("aria.js")).expect("the shared corpus");
    std::fs::write(root.join("notes.txt"), "not a variant's kind").unwrap();
}

#[test]
fn a_built_site_is_served_with_variants_from_the_first_request() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    build_then_serve(dir.path(), &["--data-dir", data.to_str().unwrap()]);
}

/// Built into a fleet's Redis store, served by an instance on it (whose own data
/// directory is empty).
#[cfg(feature = "redis")]
#[test]
fn a_site_built_into_redis_is_served_with_variants_by_an_instance_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let redis = testbed::redis::RedisServer::start(dir.path()).expect("redis-server starts");
    let data = dir.path().join("data");
    build_then_serve(
        dir.path(),
        &[
            "--store",
            &redis.url(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
    );
    assert!(
        !data.join("store").exists(),
        "nothing was kept in --data-dir"
    );
}

/// `variants build` of a site into the store `store_args` name, then `serve` on the
/// same store: the very first request for each file gets a variant.
fn build_then_serve(dir: &Path, store_args: &[&str]) {
    let root = dir.join("site");
    site(&root);
    let root_arg = root.to_str().unwrap();
    let build = |args: &[&str]| {
        let mut full = vec!["variants", "build", root_arg];
        full.extend_from_slice(args);
        wirefold(&full)
    };

    let built = build(store_args);
    let stdout = String::from_utf8_lossy(&built.stdout);
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "{stdout}{stderr}");
    let text = cfg!(feature = "minify");
    let files = if text { 2 } else { 1 };
    assert!(
        stdout.contains(&format!("{files} files, {files} done (0 skipped)")),
        "{stdout}"
    );
    assert!(!stdout.contains(" 0 variants kept"), "{stdout}");
    // Not a terminal: no progress bar drawn.
    assert!(!stderr.contains("files"), "{stderr}");

    // Built again: everything is kept already.
    let again = build(store_args);
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(again.contains(" 0 variants kept"), "{again}");

    let mut serve_args = vec![
        "--root",
        root_arg,
        "--listen",
        "127.0.0.1:0",
        "--admin",
        "127.0.0.1:0",
    ];
    serve_args.extend_from_slice(store_args);
    let (_server, base) = serve(&serve_args);
    let photo = save_data_head(&base, "/img/photo.jpg", "image/webp,*/*");
    assert!(photo.contains("tcn: choice"), "{photo}");
    assert!(photo.contains("content-type: image/webp"), "{photo}");
    if cfg!(feature = "avif") {
        // The build ran the later pass too.
        let photo = save_data_head(&base, "/img/photo.jpg", "image/avif,image/webp,*/*");
        assert!(photo.contains("content-type: image/avif"), "{photo}");
    }
    if text {
        let script = save_data_head(&base, "/aria.js", "*/*");
        assert!(script.contains("tcn: choice"), "{script}");
        assert!(
            script.contains("content-location: /.wirefold/v/"),
            "{script}"
        );
    }
}

#[test]
fn a_missing_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-site");
    let out = wirefold(&[
        "variants",
        "build",
        missing.to_str().unwrap(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-site"), "{stderr}");
}

#[test]
fn an_unreadable_file_is_skipped_with_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("site");
    site(&root);
    let locked = root.join("img/locked.png");
    std::fs::write(&locked, b"\x89PNG").unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read(&locked).is_ok() {
        eprintln!("privileged (root): every file is readable; nothing to test");
        return;
    }
    let out = wirefold(&[
        "variants",
        "build",
        root.to_str().unwrap(),
        "--data-dir",
        dir.path().join("data").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("locked.png"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("(1 skipped)"));
}
