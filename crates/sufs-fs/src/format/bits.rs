//! Bit access over a map held in a byte buffer (bit `i` is bit `i % 8` of byte `i / 8`, as in
//! FreeBSD's `isset`/`setbit`).

pub fn bit_get(map: &[u8], i: usize) -> bool {
    map[i / 8] & (1 << (i % 8)) != 0
}
pub fn bit_set(map: &mut [u8], i: usize, v: bool) {
    if v {
        map[i / 8] |= 1 << (i % 8);
    } else {
        map[i / 8] &= !(1 << (i % 8));
    }
}
