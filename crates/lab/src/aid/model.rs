//! The round-trip model of `lab aid`: how many round trips a client needs to hold a page
//! and all its inline resources, without and with automatic inline download (AID). The
//! model and its derivation from Chandranmenon & Varghese's equation 1 are in docs/lab.md.
//!
//! Time is counted in whole round trips from the client's first SYN. Everything happens
//! at round boundaries: a request sent at round `t` brings the response's first flight
//! by `t + 1`, each further flight one round later.

use serde::Serialize;

/// The TCP and browser parameters of the model.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Tcp {
    /// Congestion window of a new connection, in segments (1 in the 2001 study, 10 today).
    pub initial_window: u64,
    /// Segment payload, bytes.
    pub mss: u64,
    /// Most connections the client opens to the server (browsers: 6 per host).
    pub connections: usize,
}

/// One inline resource, in document order.
#[derive(Clone, Copy, Debug)]
pub struct Fetch {
    /// The client can request the resource once the page's bytes up to here have arrived.
    pub known_at_byte: u64,
    pub bytes: u64,
}

/// One TCP connection in slow start: no loss, no receiver-window limit, an ACK per
/// segment, and no slow-start restart (its idle gaps are shorter than a retransmission
/// timeout).
struct Connection {
    /// Congestion window, segments.
    cwnd: u64,
    /// When the connection can carry the next request (after its handshake, or after the
    /// last byte of its current response).
    free_at: u64,
}

impl Connection {
    /// A connection whose SYN leaves at `at`: the handshake takes one round trip and the
    /// request rides on the handshake's final ACK.
    fn open(at: u64, tcp: &Tcp) -> Self {
        Self {
            cwnd: tcp.initial_window,
            free_at: at + 1,
        }
    }

    /// Sends a response of `segments` to a request sent at `request_at`. Returns, per
    /// flight, when it arrives and how many segments have arrived by then.
    fn respond(&mut self, request_at: u64, segments: u64) -> Vec<(u64, u64)> {
        let mut flights = Vec::new();
        let (mut at, mut arrived) = (request_at, 0);
        while arrived < segments {
            let sent = self.cwnd.min(segments - arrived);
            at += 1;
            arrived += sent;
            // Slow start: the window grows by one segment per segment acknowledged.
            self.cwnd += sent;
            flights.push((at, arrived));
        }
        self.free_at = at;
        flights
    }
}

impl Tcp {
    /// Segments of a response of `bytes` (at least one: the status line and headers).
    pub fn segments(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.mss).max(1)
    }

    /// Round trips until the client holds the page and every resource, fetching them
    /// itself: the page on a first connection; each resource requested as soon as its
    /// reference has arrived and a connection is free, on the connection that can send
    /// the request first (a new one, if fewer than `connections` are open, costs a
    /// handshake; ties go to an open one).
    pub fn rtts_without(&self, page_bytes: u64, resources: &[Fetch]) -> u64 {
        let mut first = Connection::open(0, self);
        let page = first.respond(first.free_at, self.segments(page_bytes));
        let mut done = first.free_at;
        let mut open = vec![first];
        for fetch in resources {
            let known_at = self.arrival(&page, fetch.known_at_byte);
            #[allow(
                clippy::expect_used,
                reason = "`open` starts with the page's connection and only grows"
            )]
            let (best, start) = open
                .iter()
                .enumerate()
                .map(|(i, c)| (i, c.free_at.max(known_at)))
                .min_by_key(|&(i, start)| (start, std::cmp::Reverse(open[i].cwnd)))
                .expect("the page's connection is open");
            let new_start = known_at + 1;
            let index = if open.len() < self.connections && new_start < start {
                open.push(Connection::open(known_at, self));
                open.len() - 1
            } else {
                best
            };
            let connection = &mut open[index];
            connection.respond(connection.free_at.max(known_at), self.segments(fetch.bytes));
            done = done.max(connection.free_at);
        }
        done
    }

    /// Round trips until the client holds the page and every resource when the server
    /// sends the resources unasked right behind the page, on the page's connection: one
    /// slow-start transfer of all the bytes.
    pub fn rtts_with(&self, page_bytes: u64, resources: &[Fetch]) -> u64 {
        let total = page_bytes + resources.iter().map(|f| f.bytes).sum::<u64>();
        let mut connection = Connection::open(0, self);
        connection.respond(connection.free_at, self.segments(total));
        connection.free_at
    }

    /// When the page's byte `offset` (exclusive end) has arrived, given its flights.
    fn arrival(&self, flights: &[(u64, u64)], offset: u64) -> u64 {
        let segment = offset.div_ceil(self.mss).max(1);
        flights
            .iter()
            .find(|&&(_, arrived)| arrived >= segment)
            .or(flights.last())
            .map_or(0, |&(at, _)| at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1460;

    fn tcp(initial_window: u64, connections: usize) -> Tcp {
        Tcp {
            initial_window,
            mss: MSS,
            connections,
        }
    }

    fn fetch(segment: u64, segments: u64) -> Fetch {
        Fetch {
            known_at_byte: segment * MSS,
            bytes: segments * MSS,
        }
    }

    #[test]
    fn a_lone_page_is_a_handshake_plus_its_slow_start_flights() {
        // IW 1, 10 segments: flights of 1, 2, 4, then the last 3 → 4 rounds + handshake.
        assert_eq!(tcp(1, 6).rtts_without(10 * MSS, &[]), 5);
        assert_eq!(tcp(1, 6).rtts_with(10 * MSS, &[]), 5);
        // 1 + 2 + 4 + 8 = 15 segments still take 4 flights; the 16th needs a fifth.
        assert_eq!(tcp(1, 6).rtts_with(15 * MSS, &[]), 5);
        assert_eq!(tcp(1, 6).rtts_with(15 * MSS + 1, &[]), 6);
        // IW 10: 10 segments in one flight.
        assert_eq!(tcp(10, 6).rtts_with(10 * MSS, &[]), 2);
        // An empty body still takes a segment.
        assert_eq!(tcp(10, 6).rtts_with(0, &[]), 2);
    }

    #[test]
    fn a_reference_in_the_last_segment_costs_a_round_trip_without_aid() {
        // IW 1, page of 10 segments done at round 5 with cwnd 11; the reference arrives
        // in segment 10, so the request leaves at 5 and its one segment arrives at 6.
        assert_eq!(tcp(1, 1).rtts_without(10 * MSS, &[fetch(10, 1)]), 6);
        // With AID the 11 segments flow 1, 2, 4, 4: done at 5.
        assert_eq!(tcp(1, 1).rtts_with(10 * MSS, &[fetch(10, 1)]), 5);
    }

    #[test]
    fn an_early_reference_goes_on_a_parallel_connection() {
        // Known at round 2 (segment 1); a second connection's handshake ends at 3, the
        // resource arrives at 4, before the page ends at 5.
        assert_eq!(tcp(1, 6).rtts_without(10 * MSS, &[fetch(1, 1)]), 5);
        // With one connection it waits for the page: 5 + 1.
        assert_eq!(tcp(1, 1).rtts_without(10 * MSS, &[fetch(1, 1)]), 6);
        // A 4-segment resource on a new IW-1 connection: handshake to 3, flights 1, 2, 1
        // arrive at 4, 5, 6.
        assert_eq!(tcp(1, 6).rtts_without(10 * MSS, &[fetch(1, 4)]), 6);
    }

    #[test]
    fn resources_queue_for_the_connections_they_may_open() {
        // IW 10: page in one flight (round 2). Three 1-segment resources known at 2:
        // on the page's connection they follow each other (3, 4, 5); with two
        // connections the second opens at 2 (handshake to 3) and takes one (4) while the
        // first takes two (3, 4).
        let refs = [fetch(1, 1), fetch(1, 1), fetch(1, 1)];
        assert_eq!(tcp(10, 1).rtts_without(5 * MSS, &refs), 5);
        assert_eq!(tcp(10, 2).rtts_without(5 * MSS, &refs), 4);
        assert_eq!(tcp(10, 2).rtts_with(5 * MSS, &refs), 2);
    }

    #[test]
    fn big_resources_can_favour_parallel_slow_starts() {
        // Six 60-segment resources known at round 2. With AID one IW-10 slow start
        // carries 361 segments: 10, 20, 40, 80, 160, 51 → round 7. Without, the page's
        // connection (cwnd 11) takes the first (11, 22, 27 → round 5) and five new
        // connections take the rest (10, 20, 30 → round 6 each).
        let refs = [fetch(1, 60); 6];
        assert_eq!(tcp(10, 6).rtts_with(MSS, &refs), 7);
        assert_eq!(tcp(10, 6).rtts_without(MSS, &refs), 6);
        // One connection: 5, then one flight each (cwnd 71 and growing): 6, 7, 8, 9, 10.
        assert_eq!(tcp(10, 1).rtts_without(MSS, &refs), 10);
    }
}
