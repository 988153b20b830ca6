//! HAR 1.2 (HTTP Archive, as browsers export it). A HAR is one JSON document, so it is
//! parsed whole, within a size limit; its entries are then handed out one at a time and
//! each body is decoded only when its turn comes.
//!
//! Bodies in `response.content.text` are already free of content codings (browsers
//! store what they decoded); `encoding: "base64"` marks binary ones. Entries without
//! text are exchanges without a body. The client of an entry is its page (`pageref`).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use super::{media_type, Exchange, Item, Location, Skipped, TraceLimits};
use crate::LabError;

#[derive(Deserialize)]
struct Har {
    log: Log,
}

#[derive(Deserialize)]
struct Log {
    #[serde(default)]
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    pageref: Option<String>,
    started_date_time: Option<String>,
    request: Request,
    response: Response,
}

#[derive(Deserialize)]
struct Request {
    method: Option<String>,
    url: String,
}

#[derive(Deserialize)]
struct Response {
    /// Browsers write 0 (or -1) for requests that got no response.
    status: i64,
    #[serde(default)]
    headers: Vec<Header>,
    content: Option<Content>,
}

#[derive(Deserialize)]
struct Header {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Content {
    mime_type: Option<String>,
    text: Option<String>,
    encoding: Option<String>,
}

pub fn read(path: &Path, limits: TraceLimits) -> Result<HarReader, LabError> {
    let read_error = |source| LabError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(read_error)?;
    let size = file.metadata().map_err(read_error)?.len();
    if size > limits.max_har {
        return Err(LabError::BadInput {
            path: path.to_path_buf(),
            reason: format!(
                "a HAR file is parsed whole; this one has {size} bytes, over the limit of {} (--max-har-mib)",
                limits.max_har
            ),
        });
    }
    let reader = BufReader::new(file).take(limits.max_har);
    let har: Har = serde_json::from_reader(reader).map_err(|e| LabError::BadInput {
        path: path.to_path_buf(),
        reason: format!("not a HAR 1.2 document: {e}"),
    })?;
    Ok(HarReader {
        path: path.to_path_buf(),
        limits,
        entries: har.log.entries.into_iter().enumerate(),
    })
}

pub struct HarReader {
    path: PathBuf,
    limits: TraceLimits,
    entries: std::iter::Enumerate<std::vec::IntoIter<Entry>>,
}

impl HarReader {
    fn exchange(&self, entry: Entry) -> Result<Exchange, String> {
        let response = entry.response;
        let header_type = response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-type"))
            .and_then(|h| media_type(&h.value));
        let (content_type, body) = match response.content {
            Some(content) => {
                let body = match (content.text, content.encoding.as_deref()) {
                    (None, _) => None,
                    (Some(text), Some(enc)) if enc.eq_ignore_ascii_case("base64") => Some(
                        base64::engine::general_purpose::STANDARD
                            .decode(text.trim())
                            .map_err(|e| format!("content.text is not valid base64: {e}"))?,
                    ),
                    (Some(_), Some(enc)) => {
                        return Err(format!("unknown content.encoding {enc:?}"))
                    }
                    (Some(text), None) => Some(text.into_bytes()),
                };
                (content.mime_type.as_deref().and_then(media_type), body)
            }
            None => (None, None),
        };
        if body
            .as_ref()
            .is_some_and(|b| b.len() > self.limits.max_body)
        {
            return Err(format!(
                "body over the limit of {} bytes (--max-body-mib)",
                self.limits.max_body
            ));
        }
        Ok(Exchange {
            url: entry.request.url,
            method: entry.request.method,
            status: u16::try_from(response.status).unwrap_or(0),
            content_type: content_type.or(header_type),
            client: entry.pageref,
            time: entry.started_date_time,
            body,
            revisit_of: None,
        })
    }
}

impl Iterator for HarReader {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        let (i, entry) = self.entries.next()?;
        Some(self.exchange(entry).map_err(|reason| Skipped {
            file: self.path.clone(),
            at: Location::Entry(i),
            reason,
        }))
    }
}
