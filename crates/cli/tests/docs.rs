//! The operator documentation held to the code: every configuration key and every
//! metric the code has is in `docs/`, and everything `docs/` lists there exists.
#![allow(clippy::expect_used, reason = "a test: a failed expectation fails it")]

mod servers;

use std::collections::BTreeSet;
use std::path::Path;

use client_proxy::ClientConfig;
use proxy::config::{Config, PatternRule};
use serde_json::Value;
use servers::*;

fn read_doc(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The dotted key paths of a serialized configuration. A table contributes its keys,
/// not itself; an array of tables contributes its own key and its elements' keys
/// (`compression.profile`, `compression.profile.types`); anything else, an unset
/// `Option` (`null`) and an array of values included, is one key.
fn keys_in_code(value: &Value, prefix: &str, keys: &mut BTreeSet<String>) {
    let dotted = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    match value {
        Value::Object(table) => {
            for (key, value) in table {
                let path = dotted(key);
                match value {
                    Value::Object(_) => keys_in_code(value, &path, keys),
                    Value::Array(items) if items.iter().any(Value::is_object) => {
                        for item in items {
                            keys_in_code(item, &path, keys);
                        }
                        keys.insert(path);
                    }
                    _ => {
                        keys.insert(path);
                    }
                }
            }
        }
        other => panic!("a configuration serializes to a table, not {other}"),
    }
}

/// The keys a markdown text documents: every `key = …` line of its ```toml blocks,
/// dotted with the `[section]` or `[[array.of.tables]]` header above it (which
/// counts as a key itself). Commented-out lines (`# cert = "chain.pem"`) count:
/// that is how keys without a default value are shown.
fn keys_in_doc(markdown: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut in_toml = false;
    let mut section = String::new();
    for line in markdown.lines() {
        let line = line.trim();
        if !in_toml {
            if line == "```toml" {
                in_toml = true;
                section.clear();
            }
            continue;
        }
        if line == "```" {
            in_toml = false;
            continue;
        }
        let line = line.strip_prefix('#').map_or(line, str::trim_start);
        if let Some(header) = line.strip_prefix("[[") {
            let (name, _) = header.split_once("]]").expect("`[[name]]` header");
            section = name.trim().to_string();
            keys.insert(section.clone());
        } else if let Some(header) = line.strip_prefix('[') {
            let (name, _) = header.split_once(']').expect("`[name]` header");
            section = name.trim().to_string();
        } else if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            let is_key = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if is_key {
                keys.insert(if section.is_empty() {
                    key.to_string()
                } else {
                    format!("{section}.{key}")
                });
            }
        }
    }
    keys
}

fn assert_same_keys(what: &str, in_code: &BTreeSet<String>, in_doc: &BTreeSet<String>) {
    let undocumented: Vec<_> = in_code.difference(in_doc).collect();
    let unknown: Vec<_> = in_doc.difference(in_code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{what}: in the code but not in docs/configuration.md: {undocumented:?}; \
         in docs/configuration.md but not in the code: {unknown:?}"
    );
}

/// Every key of `wirefold serve`'s configuration (`Config::default()` serialized,
/// unset `Option`s included) appears in docs/configuration.md's TOML blocks before
/// the `wirefold client` section, and every key there exists in `Config`.
#[test]
fn every_server_config_key_is_documented_and_every_documented_key_exists() {
    let mut config = Config::default();
    // Empty by default: one rule, so that its fields are compared too.
    config.delta.pattern = vec![PatternRule {
        prefix: "/blog/".into(),
        pattern: "/blog/*".into(),
    }];
    let mut in_code = BTreeSet::new();
    keys_in_code(&serde_json::to_value(&config).unwrap(), "", &mut in_code);

    let doc = read_doc("configuration.md");
    let (server_part, _) = doc
        .split_once("## `wirefold client`")
        .expect("configuration.md has a `wirefold client` section");
    assert_same_keys("wirefold serve", &in_code, &keys_in_doc(server_part));
}

/// The configuration the package installs as `/etc/wirefold/wirefold.toml`
/// (`packaging/wirefold.toml`) shows every key of `wirefold serve`'s configuration
/// commented out (`#key = value`) with its default, or with an example of the right
/// type when the key has no default; as shipped, it reads as the defaults.
#[test]
fn the_shipped_config_shows_every_key_with_its_default() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/wirefold.toml");
    let shipped =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // As shipped it sets nothing: its tables are empty.
    let as_shipped: toml::Table = toml::from_str(&shipped).expect("the shipped file parses");
    let set: Vec<_> = as_shipped
        .iter()
        .filter(|(_, value)| value.as_table().is_none_or(|table| !table.is_empty()))
        .collect();
    assert!(
        set.is_empty(),
        "packaging/wirefold.toml sets {set:?}: comment it out"
    );

    // Every setting taken in: `#key = …` and `#[[table]]` lose their `#`; prose
    // comments (`# …`) stay.
    let uncommented: Vec<&str> = shipped
        .lines()
        .map(|line| match line.strip_prefix('#') {
            Some(setting) if setting.starts_with(|c: char| c.is_ascii_lowercase() || c == '[') => {
                setting
            }
            _ => line,
        })
        .collect();
    let uncommented = uncommented.join("\n");
    // Parsing as `Config` checks the examples' types and that no key is unknown.
    if let Err(e) = toml::from_str::<Config>(&uncommented) {
        panic!("packaging/wirefold.toml with every setting uncommented: {e}");
    }
    let settings: toml::Table = toml::from_str(&uncommented).unwrap();
    let mut problems = Vec::new();
    compare_with_defaults(
        &serde_json::to_value(Config::default()).unwrap(),
        &serde_json::to_value(settings).unwrap(),
        "",
        &mut problems,
    );
    assert!(
        problems.is_empty(),
        "packaging/wirefold.toml: {problems:#?}"
    );
}

/// Where the tables of a configuration file, `settings`, fall short of showing
/// `defaults`: a key absent, or a value other than its default (a key whose default
/// is unset may show any value).
fn compare_with_defaults(
    defaults: &Value,
    settings: &Value,
    prefix: &str,
    problems: &mut Vec<String>,
) {
    let Value::Object(defaults) = defaults else {
        panic!("defaults serialize to a table");
    };
    for (key, default) in defaults {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (default, settings.get(key)) {
            (_, None) => problems.push(format!("`{path}` is not shown")),
            (Value::Null, Some(_)) => {}
            (Value::Object(_), Some(table)) => {
                compare_with_defaults(default, table, &path, problems)
            }
            (Value::Array(default), Some(Value::Array(shown)))
                if default.len() == shown.len() && default.iter().all(Value::is_object) =>
            {
                for (i, (default, shown)) in default.iter().zip(shown).enumerate() {
                    compare_with_defaults(default, shown, &format!("{path}[{i}]"), problems);
                }
            }
            (default, Some(shown)) if shown != default => {
                problems.push(format!("`{path}` shows {shown}; its default is {default}"))
            }
            _ => {}
        }
    }
}

/// The same for `wirefold client`'s file (`ClientConfig`), against the TOML blocks of
/// docs/configuration.md's `wirefold client` section.
#[test]
fn every_client_config_key_is_documented_and_every_documented_key_exists() {
    let mut in_code = BTreeSet::new();
    let config = serde_json::to_value(ClientConfig::default()).unwrap();
    keys_in_code(&config, "", &mut in_code);

    let doc = read_doc("configuration.md");
    let (_, client_part) = doc
        .split_once("## `wirefold client`")
        .expect("configuration.md has a `wirefold client` section");
    assert_same_keys("wirefold client", &in_code, &keys_in_doc(client_part));
}

/// `(name, type)` of every metric family in an OpenMetrics exposition, named as its
/// samples are: a counter family `x` (`# TYPE x counter`) is `x_total`.
fn families_exposed(metrics: &str) -> BTreeSet<(String, String)> {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').expect("`# TYPE name type`");
            let name = match kind {
                "counter" => format!("{name}_total"),
                _ => name.to_string(),
            };
            (name, kind.to_string())
        })
        .collect()
}

/// The rows of the first markdown table after `marker` in `markdown`, as trimmed
/// cells (the header and separator rows skipped).
fn table_rows(markdown: &str, marker: &str) -> Vec<Vec<String>> {
    let (_, after) = markdown
        .split_once(marker)
        .unwrap_or_else(|| panic!("no `{marker}` in the document"));
    after
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<String> = row.split('|').map(|c| c.trim().to_string()).collect();
            cells[1..cells.len() - 1].to_vec()
        })
        .collect()
}

/// The backquoted words of a markdown cell.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// `(name, type)` of every metric in a docs/operations.md metrics table (the first
/// after `heading`): each backquoted name in a row's first cell, with the row's second
/// cell.
fn families_documented(operations: &str, heading: &str) -> BTreeSet<(String, String)> {
    let mut families = BTreeSet::new();
    for row in table_rows(operations, heading) {
        for name in quoted(&row[0]) {
            families.insert((name, row[1].clone()));
        }
    }
    families
}

/// After traffic through every mechanism that has a metric (a compressed response,
/// a cache hit, an origin error, a body decoding past `limits.max_buffered_body`, a
/// link request), the families `/metrics` exposes are exactly those
/// docs/operations.md's table lists, with the same types. prometheus-client (0.25)
/// writes no `# TYPE` line for a labelled family nothing has touched yet, so a
/// documented family must be touched here to be seen.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(feature = "redis"),
    ignore = "the shared store's metrics need the `redis` feature"
)]
async fn every_metric_is_documented_and_every_documented_metric_exists() {
    // A stylesheet reference, so the page's manifest announces a link.
    let page = "<link rel=stylesheet href=/site.css>\n".to_string()
        + &"<p>the same words again and again</p>\n".repeat(200);
    let big_text = "line after line of plain text\n".repeat(4096);
    let big_gzip = bytes::Bytes::from(codec::compress(
        wirefold_http::ContentCoding::Gzip,
        6,
        big_text.as_bytes(),
    ));
    let origin = origin(move |request| match request.uri().path() {
        "/page.html" => response(
            200,
            &[
                ("content-type", "text/html"),
                ("cache-control", "max-age=60"),
            ],
            page.clone(),
        ),
        "/big.txt" => response(
            200,
            &[("content-type", "text/plain"), ("content-encoding", "gzip")],
            big_gzip.clone(),
        ),
        // Claims gzip, is not: a corrupt body, a 502.
        _ => response(
            200,
            &[("content-type", "text/html"), ("content-encoding", "gzip")],
            "not gzip at all",
        ),
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let mut config = test_config(data.path());
    config.origin = Some(origin.url(""));
    config.limits.max_buffered_body = 16 * 1024;
    config.link.enabled = true;
    let proxy = Proxy {
        running: start_link_server(config).await,
        data,
    };

    let first = curl(&proxy.url("/page.html"), &["-H", "Accept-Encoding: br"]).await;
    assert_eq!(
        (first.status, first.header("content-encoding")),
        (200, Some("br"))
    );
    let again = curl(&proxy.url("/page.html"), &["-H", "Accept-Encoding: br"]).await;
    assert_eq!(again.status, 200);
    let broken = curl(&proxy.url("/broken.html"), &[]).await;
    assert_eq!(broken.status, 502);
    let big = curl(&proxy.url("/big.txt"), &["--compressed"]).await;
    assert_eq!((big.status, big.body.len()), (200, big_text.len()));
    // Accepting pushes: the page's stylesheet (a corrupt body here) is promised and
    // withdrawn, which touches the push counters.
    let linked = curl(
        &proxy.url("/page.html"),
        &[
            "--http2-prior-knowledge",
            "-H",
            "wirefold-link: 1",
            "-H",
            "wirefold-push: 1",
            "-H",
            "accept: text/html",
        ],
    )
    .await;
    assert_eq!(linked.status, 200);
    let reload = curl(&proxy.admin_url("/reload"), &["-X", "POST"]).await;
    assert_eq!(reload.status, 501, "no configuration source to reload from");

    let metrics = String::from_utf8(curl(&proxy.admin_url("/metrics"), &[]).await.body).unwrap();
    let mut exposed = families_exposed(&metrics);

    // A server whose shared store (Redis) cannot be reached: still answers, and
    // reports the store's state.
    let fleet = start_proxy(&origin.url(""), |config| {
        config.store = Some(format!("redis://{}", dead_address()));
    })
    .await;
    let served = curl(&fleet.url("/page.html"), &[]).await;
    assert_eq!(served.status, 200);
    let metrics = String::from_utf8(curl(&fleet.admin_url("/metrics"), &[]).await.body).unwrap();
    assert!(
        metrics.contains("wirefold_store_shared_state{state=\"unreachable\"} 1"),
        "{metrics}"
    );
    exposed.extend(families_exposed(&metrics));
    let documented = families_documented(&read_doc("operations.md"), "## Metrics");
    let undocumented: Vec<_> = exposed.difference(&documented).collect();
    let absent: Vec<_> = documented.difference(&exposed).collect();
    assert!(
        undocumented.is_empty() && absent.is_empty(),
        "exposed but not in docs/operations.md (or with another type): {undocumented:?}; \
         in docs/operations.md but not exposed (gone from the code, or untouched by this \
         test's traffic): {absent:?}\n{metrics}"
    );
}

/// The client proxy's families are those docs/operations.md's client proxy table
/// lists, with the same types, and its `outcome` label takes exactly the documented
/// values.
#[test]
fn every_client_proxy_metric_is_documented_and_every_documented_one_exists() {
    use client_proxy::metrics::{Answered, ClientMetrics, Pushed};
    let metrics = ClientMetrics::new();
    for outcome in Answered::ALL {
        metrics.answered(outcome);
    }
    for outcome in Pushed::ALL {
        metrics.pushed(outcome, 1);
    }
    let operations = read_doc("operations.md");
    let heading = "## Client proxy metrics";
    assert_eq!(
        families_exposed(&metrics.encode().expect("the metrics encode")),
        families_documented(&operations, heading)
    );
    let outcomes: BTreeSet<String> = table_rows(&operations, heading)
        .iter()
        .find(|row| row[0] == "`wirefold_client_requests_total`")
        .map(|row| quoted(&row[2]).into_iter().skip(1).collect())
        .expect("the requests row");
    let in_code: BTreeSet<String> = Answered::ALL
        .iter()
        .map(|a| a.label().to_string())
        .collect();
    assert_eq!(in_code, outcomes);
    let push_outcomes: BTreeSet<String> = table_rows(&operations, heading)
        .iter()
        .find(|row| row[0] == "`wirefold_client_pushes_total`")
        .map(|row| quoted(&row[2]).into_iter().skip(1).collect())
        .expect("the pushes row");
    let in_code: BTreeSet<String> = Pushed::ALL.iter().map(|p| p.label().to_string()).collect();
    assert_eq!(in_code, push_outcomes);
}

/// docs/link-protocol.md's `[link]` table names every key of the section with its
/// default, as the configuration serializes it (`none` for an unset value).
#[test]
fn the_link_protocols_key_table_matches_the_link_section() {
    let defaults = serde_json::to_value(Config::default().link).unwrap();
    let in_code: BTreeSet<(String, String)> = defaults
        .as_object()
        .expect("a table")
        .iter()
        .map(|(key, value)| {
            let shown = match value {
                Value::Null => "none".to_string(),
                other => other.to_string(),
            };
            (key.clone(), shown)
        })
        .collect();
    let documented: BTreeSet<(String, String)> =
        table_rows(&read_doc("link-protocol.md"), "Configuration (`[link]`")
            .into_iter()
            .map(|row| (row[0].trim_matches('`').to_string(), row[1].clone()))
            .collect();
    assert_eq!(in_code, documented);
}
