//! A minimal slab: stable integer keys (io_uring `user_data`) for in-flight
//! requests, with slot reuse.

/// Values addressed by the key returned from [`Slab::insert`].
pub(crate) struct Slab<T> {
    entries: Vec<Option<T>>,
    free: Vec<usize>,
    len: usize,
}

impl<T> Slab<T> {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        Slab {
            entries: Vec::with_capacity(cap),
            free: Vec::new(),
            len: 0,
        }
    }

    /// Stores `value`; its key stays valid until [`Slab::remove`].
    pub(crate) fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(key) => {
                self.entries[key] = Some(value);
                key
            }
            None => {
                self.entries.push(Some(value));
                self.entries.len() - 1
            }
        }
    }

    pub(crate) fn get_mut(&mut self, key: usize) -> Option<&mut T> {
        self.entries.get_mut(key)?.as_mut()
    }

    /// Takes the value out; the key may then be reused.
    pub(crate) fn remove(&mut self, key: usize) -> Option<T> {
        let value = self.entries.get_mut(key)?.take()?;
        self.free.push(key);
        self.len -= 1;
        Some(value)
    }

    /// Number of stored values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_reuse() {
        let mut s = Slab::with_capacity(2);
        let a = s.insert("a");
        let b = s.insert("b");
        assert_ne!(a, b);
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get_mut(99), None);
        assert_eq!(s.insert("c"), a);
        assert_eq!(s.get_mut(b).map(|v| *v), Some("b"));
        assert_eq!(s.len(), 2);
    }
}
