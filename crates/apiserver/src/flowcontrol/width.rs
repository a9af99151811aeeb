//! How many seats a request occupies (upstream `fairqueuing/../request/width.go` and
//! `list_work_estimator.go`, counting objects): one, except LISTs, one seat per 100 objects they
//! are estimated to go through, and watches that send their initial events, which are priced as
//! that LIST while they initialize. Capped at the level's maximum (at most 10).

/// Upstream's `minimumSeats`, `maximumSeats` and `objectsPerSeat`.
pub const MIN_SEATS: usize = 1;
pub const MAX_SEATS: usize = 10;
const OBJECTS_PER_SEAT: f64 = 100.0;

/// What the estimate looks at.
#[derive(Clone, Copy, Debug, Default)]
pub struct Estimate {
    /// `list`, or `watch` with initial events.
    pub list_like: bool,
    /// A LIST of one name (`fieldSelector=metadata.name=...`): one object.
    pub single: bool,
    /// Objects of the resource in the store (all namespaces), as upstream's object count tracker.
    pub stored: usize,
}

/// The largest width a level lets one request take: upstream caps it at 10 and at the level's
/// nominal limit divided among a hand's queues (so one request cannot take a whole small level).
pub fn max_seats(nominal_limit: usize, hand_size: usize) -> usize {
    let per_hand = nominal_limit.div_ceil(hand_size.max(1));
    per_hand.clamp(MIN_SEATS, MAX_SEATS)
}

/// The seats of a request (rkube serves LISTs from the watch cache, so every LIST goes through the
/// stored objects, as upstream's `isListFromCache`).
pub fn seats(e: Estimate, max: usize) -> usize {
    if !e.list_like {
        return MIN_SEATS;
    }
    let objects = if e.single { 1 } else { e.stored };
    let seats = (objects as f64 / OBJECTS_PER_SEAT).ceil() as usize;
    seats.clamp(MIN_SEATS, max.max(MIN_SEATS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_by_stored_objects() {
        let list = |stored, single| Estimate {
            list_like: true,
            single,
            stored,
        };
        assert_eq!(seats(Estimate::default(), 10), 1);
        assert_eq!(seats(list(0, false), 10), 1);
        assert_eq!(seats(list(101, false), 10), 2);
        assert_eq!(seats(list(450, false), 10), 5);
        assert_eq!(seats(list(10_000, false), 10), 10);
        assert_eq!(seats(list(10_000, false), 4), 4);
        assert_eq!(seats(list(10_000, true), 10), 1);
    }

    #[test]
    fn the_cap_follows_the_level() {
        assert_eq!(max_seats(49, 6), 9);
        assert_eq!(max_seats(600, 6), 10);
        assert_eq!(max_seats(1, 8), 1);
        assert_eq!(max_seats(3, 0), 3);
    }
}
