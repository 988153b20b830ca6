//! Shared dictionaries trained over a site's pages (`wirefold dict train`): for
//! first visits, where no earlier instance of the page exists to compress against.
//!
//! The samples are the newest stored instance of every resource of the site whose
//! path matches the pattern; the dictionary is published like a derived one and
//! announced (`Link: rel="compression-dictionary"`) on the pages it serves.

use serde::{Deserialize, Serialize};
use store::{Hash, Store};

use super::dictionaries::{self, Destination, DERIVED_PREFIX};
use super::history::History;

/// What a training run did.
#[derive(Serialize, Debug)]
pub struct Trained {
    pub site: String,
    pattern: String,
    pub samples: usize,
    pub sample_bytes: u64,
    pub dictionary_bytes: usize,
    pub hash: String,
    /// Where the dictionary is served.
    pub url: String,
}

#[derive(Serialize, Deserialize, Default)]
struct TrainedList {
    /// (pattern, dictionary hash hex), newest training per pattern.
    dictionaries: Vec<(String, String)>,
}

/// Stored instances considered per run at most.
const MAX_SAMPLES: usize = 10_000;

fn list_key(site: &str) -> String {
    format!("trained:{site}")
}

/// Trains a dictionary of at most `max_size` bytes for `site`'s resources whose
/// path matches `pattern`, and publishes it for that pattern.
pub fn train(store: &Store, site: &str, pattern: &str, max_size: usize) -> Result<Trained, String> {
    let prefix = format!("hist:{site}/");
    let mut samples: Vec<(u64, bytes::Bytes)> = Vec::new();
    for (key, value) in store
        .records_with_prefix(&prefix, MAX_SAMPLES)
        .map_err(|e| e.to_string())?
    {
        let path_and_query = &key["hist:".len() + site.len()..];
        let path = path_and_query.split('?').next().unwrap_or(path_and_query);
        if !wirefold_http::url_pattern::matches(pattern, path) {
            continue;
        }
        let Ok(history) = serde_json::from_slice::<History>(&value) else {
            continue;
        };
        let Some(newest) = history.versions.first() else {
            continue;
        };
        if let Some(bytes) = newest
            .hash()
            .and_then(|h| store.get_blob(&h).ok().flatten())
        {
            samples.push((newest.time, bytes));
        }
    }
    if samples.is_empty() {
        return Err(format!(
            "no stored pages of {site} match `{pattern}`: browse or fetch some first"
        ));
    }
    samples.sort_by_key(|(time, _)| *time);
    let sample_bytes = samples.iter().map(|(_, b)| b.len() as u64).sum();
    let refs: Vec<&[u8]> = samples.iter().map(|(_, b)| b.as_ref()).collect();
    let dictionary = codec::dictionary::train(&refs, max_size).map_err(|e| e.to_string())?;
    let hash = store.put_blob(&dictionary).map_err(|e| e.to_string())?;
    let url = dictionaries::publish_derived(store, &hash, site, pattern, Destination::Document)
        .map_err(|e| e.to_string())?;
    store
        .update_record(&list_key(site), |stored| {
            let mut list: TrainedList = stored
                .and_then(|v| serde_json::from_slice(v).ok())
                .unwrap_or_default();
            list.dictionaries.retain(|(p, _)| p != pattern);
            list.dictionaries.push((pattern.to_string(), hash.to_hex()));
            #[allow(
                clippy::expect_used,
                reason = "pairs of strings serialize: serde_json fails only on maps with \
                          non-string keys and on failing `Serialize` impls"
            )]
            let value = serde_json::to_vec(&list).expect("trained lists serialize");
            Some((value, Vec::new()))
        })
        .map_err(|e| e.to_string())?;
    Ok(Trained {
        site: site.to_string(),
        pattern: pattern.to_string(),
        samples: samples.len(),
        sample_bytes,
        dictionary_bytes: dictionary.len(),
        hash: hash.to_hex(),
        url,
    })
}

/// The URL of the trained dictionary whose pattern matches `path` (the longest
/// pattern wins), if its content is still stored.
pub fn trained_for(store: &Store, site: &str, path: &str) -> Option<String> {
    let list: TrainedList =
        serde_json::from_slice(&store.get_record(&list_key(site)).ok()??).ok()?;
    list.dictionaries
        .iter()
        .filter(|(pattern, _)| wirefold_http::url_pattern::matches(pattern, path))
        .max_by_key(|(pattern, _)| pattern.len())
        .and_then(|(_, hex)| hex.parse::<Hash>().ok())
        .filter(|hash| store.has_blob(hash))
        .map(|hash| format!("{DERIVED_PREFIX}{}", hash.to_hex()))
}
