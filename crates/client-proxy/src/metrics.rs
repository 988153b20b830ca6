//! What the client proxy did, in OpenMetrics text.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// How a browser's request was answered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Answered {
    /// From a held instance, fresh: no link round trip.
    LocalFresh,
    /// The server confirmed an instance (held, or the stale one it sent).
    Confirm,
    Delta,
    Full,
    /// CONNECT: bytes tunnelled untouched.
    Tunnel,
    /// An error answer: from the server (ERROR frame) or about the link.
    Error,
}

impl Answered {
    pub const ALL: [Answered; 6] = [
        Answered::LocalFresh,
        Answered::Confirm,
        Answered::Delta,
        Answered::Full,
        Answered::Tunnel,
        Answered::Error,
    ];

    /// The `outcome` label value.
    pub fn label(self) -> &'static str {
        match self {
            Answered::LocalFresh => "local_fresh",
            Answered::Confirm => "confirm",
            Answered::Delta => "delta",
            Answered::Full => "full",
            Answered::Tunnel => "tunnel",
            Answered::Error => "error",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// How a resource the server proxy promised to push ended here.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Pushed {
    /// Received whole, verified and kept.
    Kept,
    /// Confirmed as an instance held here, kept with its new fields (freshness).
    Refreshed,
    /// The server did not push it after all (skipped, or an ERROR in its place).
    Withdrawn,
    /// Not accepted: a PROMISE not asked for, out of place or naming another origin,
    /// or a pushed instance not fit to keep.
    Refused,
    /// The push stream broke: a malformed frame, an instance that failed
    /// verification, the link failing. This and every later push are dropped.
    Failed,
}

impl Pushed {
    pub const ALL: [Pushed; 5] = [
        Pushed::Kept,
        Pushed::Refreshed,
        Pushed::Withdrawn,
        Pushed::Refused,
        Pushed::Failed,
    ];

    /// The `outcome` label value.
    pub fn label(self) -> &'static str {
        match self {
            Pushed::Kept => "kept",
            Pushed::Refreshed => "refreshed",
            Pushed::Withdrawn => "withdrawn",
            Pushed::Refused => "refused",
            Pushed::Failed => "failed",
        }
    }
}

pub struct ClientMetrics {
    registry: Registry,
    requests: Family<OutcomeLabels, Counter>,
    /// Body bytes of link responses (frames), as received.
    pub link_bytes_received: Counter,
    /// Body bytes handed to browsers.
    pub browser_bytes_delivered: Counter,
    /// Link connections made after the first.
    pub reconnects: Counter,
    /// Reconstructed or confirmed instances whose SHA-256 or length did not match.
    pub verification_failures: Counter,
    pushes: Family<OutcomeLabels, Counter>,
    /// Decoded bytes of instances pushed whole and verified.
    pub push_bytes: Counter,
    /// Of those, the bytes of instances already held for their URL: pushed in vain.
    pub push_bytes_already_held: Counter,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("wirefold_client");
        let requests = Family::default();
        registry.register(
            "requests",
            "Browser requests, by how they were answered",
            requests.clone(),
        );
        let link_bytes_received = Counter::default();
        registry.register(
            "link_bytes_received",
            "Bytes of link response bodies received",
            link_bytes_received.clone(),
        );
        let browser_bytes_delivered = Counter::default();
        registry.register(
            "browser_bytes_delivered",
            "Body bytes delivered to browsers",
            browser_bytes_delivered.clone(),
        );
        let reconnects = Counter::default();
        registry.register(
            "link_reconnects",
            "Link connections made after the first",
            reconnects.clone(),
        );
        let verification_failures = Counter::default();
        registry.register(
            "verification_failures",
            "Instances discarded because their SHA-256 or length did not match",
            verification_failures.clone(),
        );
        let pushes = Family::default();
        registry.register(
            "pushes",
            "Resources the server proxy promised to push, by how each ended",
            pushes.clone(),
        );
        let push_bytes = Counter::default();
        registry.register(
            "push_bytes",
            "Decoded bytes of instances pushed whole and verified",
            push_bytes.clone(),
        );
        let push_bytes_already_held = Counter::default();
        registry.register(
            "push_bytes_already_held",
            "Decoded bytes of pushed instances this client proxy already held",
            push_bytes_already_held.clone(),
        );
        ClientMetrics {
            registry,
            pushes,
            push_bytes,
            push_bytes_already_held,
            requests,
            link_bytes_received,
            browser_bytes_delivered,
            reconnects,
            verification_failures,
        }
    }

    pub fn answered(&self, outcome: Answered) {
        self.requests
            .get_or_create(&OutcomeLabels {
                outcome: outcome.label(),
            })
            .inc();
    }

    /// Counts `count` promised resources that ended as `how`.
    pub fn pushed(&self, how: Pushed, count: usize) {
        self.pushes
            .get_or_create(&OutcomeLabels {
                outcome: how.label(),
            })
            .inc_by(count as u64);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
