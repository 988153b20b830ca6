//! Where a fleet's shared store lives (`--store`) and the states it reports: the types
//! the rest of wirefold sees whether or not this build has the Redis tier (cargo
//! feature `redis`, `shared.rs`). Without it every target is refused when parsed, so a
//! configuration naming Redis fails its check instead of running without the fleet.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Where the shared tier lives.
#[derive(Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis server: `redis://HOST:PORT[/DB]`.
    Server(String),
    /// A Redis Cluster, found through these seed nodes (`redis://HOST:PORT` each).
    Cluster(Vec<String>),
}

/// A `--store` value that names no store wirefold can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a store location ({why}): expected redis://HOST:PORT, redis+cluster://HOST:PORT[,HOST:PORT…], or a comma-separated list of redis://HOST:PORT seed nodes of a cluster")]
pub struct TargetError {
    pub input: String,
    pub why: String,
}

impl FromStr for RedisTarget {
    type Err = TargetError;

    fn from_str(input: &str) -> Result<RedisTarget, TargetError> {
        let error = |why: &str| TargetError {
            input: input.to_owned(),
            why: why.to_owned(),
        };
        let check = |url: String| check_node(url).map_err(|why| error(&why));
        if let Some(seeds) = input.strip_prefix("redis+cluster://") {
            let nodes = seeds
                .split(',')
                .map(|node| check(format!("redis://{}", node.trim())))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(RedisTarget::Cluster(nodes));
        }
        if !input.starts_with("redis://") {
            return Err(error("unknown scheme"));
        }
        if input.contains(',') {
            let nodes = input
                .split(',')
                .map(|node| check(node.trim().to_owned()))
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(RedisTarget::Cluster(nodes));
        }
        Ok(RedisTarget::Server(check(input.to_owned())?))
    }
}

/// One node's URL, checked by the Redis client's own parser.
#[cfg(feature = "redis")]
fn check_node(url: String) -> Result<String, String> {
    let info =
        redis::IntoConnectionInfo::into_connection_info(url.as_str()).map_err(|e| e.to_string())?;
    match info.addr() {
        redis::ConnectionAddr::Tcp(..) => Ok(url),
        _ => Err("only plain TCP (redis://) is supported".to_owned()),
    }
}

#[cfg(not(feature = "redis"))]
fn check_node(_url: String) -> Result<String, String> {
    Err(
        "this build of wirefold has no Redis support: build it with the cargo feature `redis`"
            .to_owned(),
    )
}

impl fmt::Display for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisTarget::Server(url) => f.write_str(url),
            RedisTarget::Cluster(nodes) => write!(f, "cluster {}", nodes.join(",")),
        }
    }
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The state of the shared tier, as reported to the store's observer on every change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedState {
    /// Answering within budget.
    Available,
    /// Unreachable or slower than the budget: the store serves without it.
    Unreachable,
    /// Refusing writes for lack of memory: reads go on, writes are suspended.
    Full,
}

impl SharedState {
    pub fn as_str(self) -> &'static str {
        match self {
            SharedState::Available => "available",
            SharedState::Unreachable => "unreachable",
            SharedState::Full => "full",
        }
    }
}

/// Told of every change of the shared tier's state (metrics hang here).
pub type StateObserver = Arc<dyn Fn(SharedState) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "redis"))]
    #[test]
    fn without_the_redis_feature_every_target_is_refused_saying_why() {
        let refused = "redis://127.0.0.1:6379".parse::<RedisTarget>().unwrap_err();
        assert!(
            refused.to_string().contains("cargo feature `redis`"),
            "{refused}"
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn targets_parse_and_name_what_is_wrong() {
        assert_eq!(
            "redis://127.0.0.1:6379".parse::<RedisTarget>().unwrap(),
            RedisTarget::Server("redis://127.0.0.1:6379".into())
        );
        assert_eq!(
            "redis+cluster://10.0.0.1:7000,10.0.0.2:7001"
                .parse::<RedisTarget>()
                .unwrap(),
            RedisTarget::Cluster(vec![
                "redis://10.0.0.1:7000".into(),
                "redis://10.0.0.2:7001".into()
            ])
        );
        assert_eq!(
            "redis://a:1,redis://b:2".parse::<RedisTarget>().unwrap(),
            RedisTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()])
        );
        for bad in [
            "memcached://x:1",
            "redis://",
            "redis+unix:///tmp/r.sock",
            "",
        ] {
            let err = bad.parse::<RedisTarget>().unwrap_err();
            assert!(err.to_string().contains("redis://HOST:PORT"), "{err}");
        }
    }
}
