//! FNV-1a, 128-bit: the kubelet's content hashes (static pod UIDs, container spec hashes). Upstream uses
//! md5 and FNV-32 of Go's struct dump; only stability across restarts matters here, not equality with
//! upstream's values.

pub struct Fnv128(u128);

const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
const PRIME: u128 = 0x0000000001000000000000000000013B;

impl Fnv128 {
    pub fn new() -> Fnv128 {
        Fnv128(OFFSET)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= *b as u128;
            self.0 = self.0.wrapping_mul(PRIME);
        }
    }

    pub fn hex(&self) -> String {
        format!("{:032x}", self.0)
    }

    /// The low 32 bits in hex (upstream's container hash is 32-bit).
    pub fn short(&self) -> String {
        format!("{:08x}", self.0 as u32)
    }
}

impl Default for Fnv128 {
    fn default() -> Self {
        Fnv128::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // FNV-1a 128 of "" is the offset basis; of "a" a published test vector.
        assert_eq!(Fnv128::new().hex(), "6c62272e07bb014262b821756295c58d");
        let mut h = Fnv128::new();
        h.write(b"a");
        assert_eq!(h.hex(), "d228cb696f1a8caf78912b704e4a8964");
    }
}
