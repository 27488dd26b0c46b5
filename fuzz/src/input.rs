//! Reading a target's choices out of the fuzzer's bytes. Hand-written rather than derived
//! (`arbitrary`) so that the stable test suite can run the targets with no dependency beyond
//! Surge's own; every read past the end yields zero, so any byte string is a valid input and
//! shorter inputs mean shorter runs, which is what libFuzzer's minimiser needs.

/// The fuzzer's bytes, consumed from the front.
pub struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Input { bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&b, rest)) => {
                self.bytes = rest;
                b
            }
            None => 0,
        }
    }

    /// A number below `n` (`n` of at most 256).
    pub fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n.max(1)
    }

    /// True about once in `n` times.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    pub fn u64(&mut self) -> u64 {
        (self.u32() as u64) | (self.u32() as u64) << 32
    }

    /// An offset, length or size: mostly small, often at the edges where sums overflow or
    /// the operating system takes offsets as negative.
    pub fn size(&mut self) -> u64 {
        match self.below(16) {
            0 => 0,
            1 => 1,
            2 => 4095 + self.below(3) as u64,
            3 => (1 << 20) - 1 + self.below(3) as u64,
            4 => (64 << 20) + self.below(3) as u64 - 1,
            5 => i64::MAX as u64 - self.below(4) as u64,
            6 => (i64::MAX as u64).wrapping_add(1 + self.below(4) as u64),
            7 => u64::MAX - self.below(4) as u64,
            8 => u32::MAX as u64 - self.below(2) as u64,
            9 => self.u64(),
            10 | 11 => self.u16() as u64 * 4096,
            _ => self.u16() as u64,
        }
    }

    /// Up to `max` bytes, taken as they come.
    pub fn bytes(&mut self, max: usize) -> &'a [u8] {
        let n = (self.u16() as usize).min(max).min(self.bytes.len());
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        taken
    }
}
