//! The ids a group-by-group reader has seen (`traj_id`s, closed `group_id`s), each with where
//! it was first seen, kept compactly for an exact uniqueness check.
//!
//! An exact check (no false "appears twice") has to keep every id, so memory grows with the
//! input; this keeps it small: the ids' bytes back to back in one buffer, 24 bytes of end
//! offset and location per id, and an open-addressing table of 8-byte slots at load ≤ 1/2.
//! About 40 bytes plus the id's length per id, against about 150 for a `HashMap<String, _>`
//! (a 24-byte `String` and its own heap block per id). Hashes are seeded per process
//! (`RandomState`), so crafted ids cannot force collisions.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// Where a record was read: input index and 1-based line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) source: usize,
    pub(crate) line: usize,
}

/// A set of strings with the location each was first inserted at.
#[derive(Default)]
pub(crate) struct IdSet {
    hasher: RandomState,
    /// Every id's bytes, in insertion order.
    text: String,
    /// Per id: the end of its bytes in `text` (its start is the previous id's end) and where.
    entries: Vec<(usize, Location)>,
    /// Open addressing, linear probing: index + 1 into `entries`, 0 = empty.
    table: Vec<usize>,
}

impl IdSet {
    fn id(&self, entry: usize) -> &str {
        let start = entry.checked_sub(1).map_or(0, |prev| self.entries[prev].0);
        &self.text[start..self.entries[entry].0]
    }

    /// The table slot holding `id`, or the empty slot where it would go.
    fn slot(&self, id: &str) -> usize {
        let mask = self.table.len() - 1;
        let mut i = (self.hasher.hash_one(id) as usize) & mask;
        loop {
            match self.table[i] {
                0 => return i,
                e if self.id(e - 1) == id => return i,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Where `id` was first inserted, if it was.
    pub(crate) fn get(&self, id: &str) -> Option<Location> {
        if self.table.is_empty() {
            return None;
        }
        match self.table[self.slot(id)] {
            0 => None,
            e => Some(self.entries[e - 1].1),
        }
    }

    /// Inserts `id` at `at`; if it is already there, keeps it and returns its location.
    pub(crate) fn insert(&mut self, id: &str, at: Location) -> Option<Location> {
        if 2 * (self.entries.len() + 1) > self.table.len() {
            self.grow();
        }
        let slot = self.slot(id);
        if let e @ 1.. = self.table[slot] {
            return Some(self.entries[e - 1].1);
        }
        self.text.push_str(id);
        self.entries.push((self.text.len(), at));
        self.table[slot] = self.entries.len();
        None
    }

    /// Doubles the table (at least 16 slots) and re-inserts every id.
    fn grow(&mut self) {
        let size = (self.table.len() * 2).max(16);
        self.table.clear();
        self.table.resize(size, 0);
        for e in 0..self.entries.len() {
            let slot = self.slot(self.id(e));
            self.table[slot] = e + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize) -> Location {
        Location { source: 0, line }
    }

    #[test]
    fn keeps_the_first_location_and_tells_ids_apart_exactly() {
        let mut ids = IdSet::default();
        assert_eq!(ids.get("a"), None);
        for i in 0..1000 {
            assert_eq!(ids.insert(&format!("t{i}"), at(i)), None);
        }
        // Prefixes and concatenations of stored ids are other ids (bytes are back to back).
        assert_eq!(ids.insert("t1", at(5000)), Some(at(1)));
        assert_eq!(ids.get("t"), None);
        assert_eq!(ids.get("t12t13"), None);
        assert_eq!(ids.insert("", at(7)), None);
        assert_eq!(ids.insert("", at(8)), Some(at(7)));
        assert_eq!(ids.get("t999"), Some(at(999)));
        assert_eq!(ids.get("t1000"), None);
        assert_eq!(ids.entries.len(), 1001);
    }
}
