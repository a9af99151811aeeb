//! Shuffle sharding (upstream `apiserver/pkg/util/shufflesharding`): a flow's hash value deals it a
//! hand of distinct queues out of a deck, the same hand every time, so two flows rarely share all
//! their queues and a heavy flow can crowd out only the few flows dealt exactly its hand.

/// The most hash bits a deal may consume (upstream's `MaxHashBits`).
pub const MAX_HASH_BITS: u32 = 60;

/// The largest hand upstream accepts for a queue set (`handSize` is validated to at most this).
const MAX_HAND_SIZE: usize = 15;

/// The bits of entropy a deal of `hand_size` cards out of `deck_size` needs.
pub fn required_entropy_bits(deck_size: usize, hand_size: usize) -> u32 {
    ((deck_size as f64).log2() * hand_size as f64).ceil() as u32
}

/// Deals hands of `hand_size` distinct cards out of `deck_size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dealer {
    deck_size: usize,
    hand_size: usize,
}

impl Dealer {
    /// A dealer, refused with upstream's messages when the sizes make no sense.
    pub fn new(deck_size: i64, hand_size: i64) -> Result<Dealer, String> {
        if deck_size <= 0 || hand_size <= 0 {
            return Err(format!(
                "deckSize {deck_size} or handSize {hand_size} is not positive"
            ));
        }
        if hand_size > deck_size {
            return Err(format!(
                "handSize {hand_size} is greater than deckSize {deck_size}"
            ));
        }
        if deck_size > 1 << 26 {
            return Err(format!("deckSize {deck_size} is impractically large"));
        }
        let (deck, hand) = (deck_size as usize, hand_size as usize);
        if hand > MAX_HAND_SIZE || required_entropy_bits(deck, hand) > MAX_HASH_BITS {
            return Err(format!(
                "required entropy bits of deckSize {deck_size} and handSize {hand_size} is greater than {MAX_HASH_BITS}"
            ));
        }
        Ok(Dealer {
            deck_size: deck,
            hand_size: hand,
        })
    }

    pub fn hand_size(&self) -> usize {
        self.hand_size
    }

    /// Calls `pick` with each card of the hand `hash` deals, in upstream's order: the hash read as
    /// a mixed-radix number gives each card's index among the cards not yet dealt.
    pub fn deal(&self, mut hash: u64, mut pick: impl FnMut(usize)) {
        let mut remainders = [0usize; MAX_HAND_SIZE];
        for (i, remainder) in remainders.iter_mut().enumerate().take(self.hand_size) {
            let radix = (self.deck_size - i) as u64;
            *remainder = (hash % radix) as usize;
            hash /= radix;
        }
        for i in 0..self.hand_size {
            let mut card = remainders[i];
            for j in (1..=i).rev() {
                if card >= remainders[j - 1] {
                    card += 1;
                }
            }
            pick(card);
        }
    }

    /// The hand `hash` deals.
    pub fn deal_into_hand(&self, hash: u64) -> Vec<usize> {
        let mut hand = Vec::with_capacity(self.hand_size);
        self.deal(hash, |card| hand.push(card));
        hand
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn entropy_bits_as_upstream() {
        assert_eq!(required_entropy_bits(1024, 6), 60);
        assert_eq!(required_entropy_bits(512, 8), 72);
    }

    #[test]
    fn dealer_refusals_as_upstream() {
        let err = |d, h| Dealer::new(d, h).unwrap_err();
        assert_eq!(err(-100, 8), "deckSize -100 or handSize 8 is not positive");
        assert_eq!(err(100, 0), "deckSize 100 or handSize 0 is not positive");
        assert_eq!(err(100, 101), "handSize 101 is greater than deckSize 100");
        assert_eq!(err(1 << 27, 2), "deckSize 134217728 is impractically large");
        assert_eq!(
            err(512, 8),
            "required entropy bits of deckSize 512 and handSize 8 is greater than 60"
        );
        assert!(Dealer::new(1024, 6).is_ok());
    }

    #[test]
    fn hands_have_distinct_cards_in_range() {
        for (deck, hand) in [
            (4, 4),
            (8, 8),
            (10, 10),
            (12, 12),
            (128, 8),
            (256, 7),
            (512, 6),
        ] {
            let dealer = Dealer::new(deck, hand).unwrap();
            for hash in [0u64, 1, 12345, u64::MAX, 0xdead_beef_cafe_f00d] {
                let cards = dealer.deal_into_hand(hash);
                assert_eq!(cards.len(), hand as usize);
                assert!(cards.iter().all(|c| *c < deck as usize));
                assert_eq!(cards.iter().collect::<HashSet<_>>().len(), hand as usize);
            }
        }
    }

    #[test]
    fn known_deals() {
        // Hash 0 deals the first cards in order; the mixed-radix digits pick among the rest.
        let dealer = Dealer::new(6, 6).unwrap();
        assert_eq!(dealer.deal_into_hand(0), vec![0, 1, 2, 3, 4, 5]);
        let dealer = Dealer::new(10, 3).unwrap();
        // 7 = 7 + 10*(0 + 9*0): first card 7, then index 0 among the rest (0), then 0 again (1).
        assert_eq!(dealer.deal_into_hand(7), vec![7, 0, 1]);
        // 10 = 0 + 10*1: card 0, then index 1 among the rest: card 2 (1 is the second card left).
        assert_eq!(dealer.deal_into_hand(10), vec![0, 2, 1]);
    }

    /// Upstream's TestUniformDistribution: over all hash values below the number of ordered deals,
    /// every hand comes up the same number of times.
    #[test]
    fn uniform_distribution() {
        let ff = |n: usize, m: usize| (n - m + 1..=n).product::<usize>();
        for (deck, hand) in [(128usize, 3usize), (50, 4)] {
            let dealer = Dealer::new(deck as i64, hand as i64).unwrap();
            let deals = ff(deck, hand);
            let mut seen: HashMap<Vec<usize>, usize> = HashMap::new();
            for hash in 0..deals as u64 {
                let mut cards = dealer.deal_into_hand(hash);
                cards.sort_unstable();
                *seen.entry(cards).or_default() += 1;
            }
            let permutations = ff(hand, hand);
            assert_eq!(seen.len(), deals / permutations);
            assert!(seen.values().all(|n| *n == permutations));
        }
    }
}
