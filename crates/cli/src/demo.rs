//! `wirefold demo`: the sample site (`wirefold-testbed`) served through the accelerator,
//! with a running summary of bytes saved.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use proxy::config::Config;
use testbed::sample_site::{self, PAGE_PERIOD};

/// Runs the demo until the process is stopped: the sample site, the accelerator in
/// front of it (store in a fresh temporary directory), and a summary every few seconds.
pub async fn run(listen: SocketAddr) -> Result<(), String> {
    let site = sample_site::start()
        .await
        .map_err(|e| format!("sample site: {e}"))?;
    let data_dir = std::env::temp_dir().join(format!("wirefold-demo-{}", std::process::id()));
    let config = Config {
        listen,
        admin: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        data_dir: data_dir.clone(),
        origin: Some(format!("http://{site}")),
        ..Config::default()
    };
    let running = proxy::start(config).await.map_err(|e| e.to_string())?;
    println!(
        "wirefold demo: a sample site that changes while it runs, served through the accelerator"
    );
    println!("  open     http://{}/", running.addr);
    println!("  origin   http://{site}/  (the same site without wirefold, to compare)");
    println!(
        "  status   http://{}/  (live bytes saved, hit rates, origin latency)",
        running.admin_addr
    );
    println!("  metrics  http://{}/metrics", running.admin_addr);
    println!(
        "  try      curl -s --compressed -o /dev/null -w '%{{size_download}} bytes\\n' http://{}/",
        running.addr
    );
    let metrics = running.metrics.clone();
    let summary = tokio::spawn(async move {
        let mut last = (0, 0);
        loop {
            tokio::time::sleep(Duration::from_secs(PAGE_PERIOD)).await;
            let (original, sent) = metrics.totals();
            if (original, sent) != last && original > 0 {
                let saved = 100.0 * (original.saturating_sub(sent)) as f64 / original as f64;
                println!(
                    "  bodies: {original} bytes as produced, {sent} bytes sent: {saved:.1}% saved"
                );
                last = (original, sent);
            }
        }
    });
    proxy::server::shutdown_signal().await;
    summary.abort();
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(())
}
