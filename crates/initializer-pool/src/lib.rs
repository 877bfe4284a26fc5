//! Content-hashed, weakly interned initializers shared across sessions.
//!
//! Two sessions that load the same model (or two models that share weights) should hold one
//! copy of each large initializer, not two. This crate provides the index that makes that
//! happen:
//!
//! - **Identity is content.** An [`InitializerKey`] is the ONNX dtype code, the shape and the
//!   SHA-256 digest of the raw bytes; never a tensor name or a pointer.
//! - **The index is weak.** The pool holds only [`Weak`] references, so when the last
//!   [`Arc`] handed out for a value is dropped (the last session closes), the value is freed.
//!   Dead index entries are pruned as the pool grows, or explicitly with
//!   [`InitializerPool::prune`].
//! - **Small tensors skip the pool.** Tensors under [`MIN_SHARED_BYTES`] (4 KiB) are built
//!   fresh every time and never indexed.
//! - **A switch disables sharing.** `ORTMLX_DISABLE_INITIALIZER_SHARING=1` turns
//!   [`InitializerPool::global`] pools off; [`InitializerPool::new`] takes the switch
//!   explicitly.
//!
//! The pool is generic over the interned payload: the runtime interns a device array built
//! from the bytes, tests can intern the bytes themselves.
//!
//! ```
//! use initializer_pool::{InitializerKey, InitializerPool};
//! use std::convert::Infallible;
//! use std::sync::Arc;
//!
//! let pool: InitializerPool<Vec<u8>> = InitializerPool::new(true);
//! let weights = vec![7u8; 8192];
//! const FLOAT: i32 = 1; // ONNX TensorProto.FLOAT
//!
//! // Session A and session B load the same weights (perhaps under different names).
//! let a = pool
//!     .get_or_insert_with(InitializerKey::new(FLOAT, &[2048], &weights), || {
//!         Ok::<_, Infallible>(weights.clone())
//!     })
//!     .unwrap();
//! let b = pool
//!     .get_or_insert_with(InitializerKey::new(FLOAT, &[2048], &weights), || {
//!         Ok::<_, Infallible>(weights.clone())
//!     })
//!     .unwrap();
//! assert!(Arc::ptr_eq(&a, &b));
//! assert_eq!(pool.len_live(), 1);
//!
//! // Closing both sessions frees the value.
//! drop((a, b));
//! assert_eq!(pool.len_live(), 0);
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// Tensors whose byte length is below this (4 KiB) bypass the pool.
pub const MIN_SHARED_BYTES: usize = 4096;

/// Environment variable that disables sharing for [`InitializerPool::global`] pools.
///
/// `1`, `true`, `yes` or `on` (case-insensitive) disable sharing; anything else, or the
/// variable being unset, leaves it on.
pub const DISABLE_SHARING_ENV: &str = "ORTMLX_DISABLE_INITIALIZER_SHARING";

/// Index size below which the pool never prunes automatically.
const MIN_PRUNE_THRESHOLD: usize = 64;

/// The content identity of an initializer: ONNX dtype code, shape and SHA-256 of the bytes.
///
/// Two keys are equal exactly when all three agree (the byte length is compared too, as a
/// cheap guard). Names and pointers play no part.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct InitializerKey {
    dtype: i32,
    dims: Box<[i64]>,
    byte_len: usize,
    digest: [u8; 32],
}

impl InitializerKey {
    /// Builds the key for a tensor of ONNX dtype code `dtype` and shape `dims` whose raw
    /// (little-endian, densely packed) data is `bytes`, hashing `bytes` with SHA-256.
    pub fn new(dtype: i32, dims: &[i64], bytes: &[u8]) -> Self {
        Self {
            dtype,
            dims: dims.into(),
            byte_len: bytes.len(),
            digest: Sha256::digest(bytes).into(),
        }
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn dtype(&self) -> i32 {
        self.dtype
    }

    /// The tensor shape.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The length in bytes of the data that was hashed.
    pub fn byte_len(&self) -> usize {
        self.byte_len
    }

    /// The SHA-256 digest of the data.
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }
}

impl fmt::Debug for InitializerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex: String = self.digest[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        f.debug_struct("InitializerKey")
            .field("dtype", &self.dtype)
            .field("dims", &self.dims)
            .field("byte_len", &self.byte_len)
            .field("sha256", &format_args!("{hex}…"))
            .finish()
    }
}

/// Counters describing what a pool has done, for tests and diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Lookups answered with an existing live value.
    pub hits: u64,
    /// Lookups that had to build the value (counted whether or not building succeeded).
    pub misses: u64,
    /// Lookups that skipped the pool: tensor under [`MIN_SHARED_BYTES`], or sharing disabled.
    pub bypassed: u64,
    /// Entries currently in the index, live or dead.
    pub indexed: usize,
    /// Entries whose value is still alive.
    pub live: usize,
}

/// One index slot. `init` serialises building the value for this key only; `value` is the
/// weak handle, locked briefly so that readers never wait on a build.
struct Slot<T> {
    init: Mutex<()>,
    value: Mutex<Weak<T>>,
}

impl<T> Slot<T> {
    fn is_live(&self) -> bool {
        self.value.lock().strong_count() > 0
    }
}

struct Index<T> {
    slots: HashMap<InitializerKey, Arc<Slot<T>>>,
    /// Prune automatically when `slots.len()` reaches this.
    prune_at: usize,
}

/// A content-addressed, weakly held index of shared initializer values.
///
/// `T` is the interned payload (raw bytes, a device array, ...). The pool is `Send + Sync`
/// when `T` is; values are handed out as `Arc<T>`.
pub struct InitializerPool<T> {
    enabled: bool,
    index: Mutex<Index<T>>,
    hits: AtomicU64,
    misses: AtomicU64,
    bypassed: AtomicU64,
}

impl<T> InitializerPool<T> {
    /// Creates an empty pool. With `enabled == false` every lookup bypasses the index and
    /// builds a fresh, unshared value.
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            index: Mutex::new(Index {
                slots: HashMap::new(),
                prune_at: MIN_PRUNE_THRESHOLD,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
        }
    }

    /// Whether this pool shares values at all.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Returns the live value for `key`, or builds it with `make`, indexes it weakly and
    /// returns it.
    ///
    /// Concurrent callers with the same key are serialised on that key only: exactly one of
    /// them runs `make`, the others wait and receive the same `Arc`. If `make` fails, its
    /// error is returned, nothing is indexed, and the next caller tries again. Callers with
    /// different keys never wait on each other's `make`.
    ///
    /// Keys under [`MIN_SHARED_BYTES`], and every key when the pool is disabled, bypass the
    /// index: `make` runs and its value is returned in a fresh `Arc`.
    ///
    /// `make` must not look up the same key in the same pool (that would deadlock); looking
    /// up other keys is fine.
    pub fn get_or_insert_with<E>(
        &self,
        key: InitializerKey,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        if !self.enabled || key.byte_len < MIN_SHARED_BYTES {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
            return make().map(Arc::new);
        }

        let slot = self.slot_for(key);
        let _building = slot.init.lock();
        if let Some(value) = slot.value.lock().upgrade() {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(value);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let value = Arc::new(make()?);
        *slot.value.lock() = Arc::downgrade(&value);
        Ok(value)
    }

    /// Returns the live value for `key`, if there is one. Never builds anything and does not
    /// touch the counters.
    pub fn get(&self, key: &InitializerKey) -> Option<Arc<T>> {
        let slot = self.index.lock().slots.get(key).cloned()?;
        slot.value.lock().upgrade()
    }

    /// Number of indexed values that are still alive.
    pub fn len_live(&self) -> usize {
        self.index
            .lock()
            .slots
            .values()
            .filter(|slot| slot.is_live())
            .count()
    }

    /// Removes index entries whose value has been freed and that no caller is currently
    /// building; returns how many were removed. The pool also prunes on its own as the index
    /// grows.
    pub fn prune(&self) -> usize {
        let mut index = self.index.lock();
        let removed = Self::prune_locked(&mut index);
        index.prune_at = (index.slots.len() * 2).max(MIN_PRUNE_THRESHOLD);
        removed
    }

    /// A snapshot of the counters and index sizes.
    pub fn stats(&self) -> PoolStats {
        let index = self.index.lock();
        PoolStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
            indexed: index.slots.len(),
            live: index.slots.values().filter(|slot| slot.is_live()).count(),
        }
    }

    /// Finds or creates the slot for `key`, pruning first if the index has grown enough.
    fn slot_for(&self, key: InitializerKey) -> Arc<Slot<T>> {
        let mut index = self.index.lock();
        if let Some(slot) = index.slots.get(&key) {
            return Arc::clone(slot);
        }
        if index.slots.len() >= index.prune_at {
            Self::prune_locked(&mut index);
            index.prune_at = (index.slots.len() * 2).max(MIN_PRUNE_THRESHOLD);
        }
        let slot = Arc::new(Slot {
            init: Mutex::new(()),
            value: Mutex::new(Weak::new()),
        });
        index.slots.insert(key, Arc::clone(&slot));
        slot
    }

    /// Drops dead slots that only the index references. A slot cloned out by a caller (who
    /// may be building its value right now) has a strong count above one and is kept, so
    /// that concurrent callers of one key always meet on the same slot.
    fn prune_locked(index: &mut Index<T>) -> usize {
        let before = index.slots.len();
        index
            .slots
            .retain(|_, slot| Arc::strong_count(slot) > 1 || slot.is_live());
        before - index.slots.len()
    }
}

impl<T: Send + Sync + 'static> InitializerPool<T> {
    /// The process-wide pool for payload type `T`, created on first use. Sharing is enabled
    /// unless [`configure_sharing`] turned sharing off.
    pub fn global() -> &'static Self {
        type Registry = Mutex<HashMap<TypeId, &'static (dyn Any + Send + Sync)>>;
        static POOLS: OnceLock<Registry> = OnceLock::new();

        let mut pools = POOLS.get_or_init(Default::default).lock();
        let pool = *pools.entry(TypeId::of::<T>()).or_insert_with(|| {
            let pool: &'static Self = Box::leak(Box::new(Self::new(sharing_enabled())));
            pool
        });
        pool.downcast_ref::<Self>()
            .expect("global pool registry is keyed by TypeId")
    }
}

impl<T> Default for InitializerPool<T> {
    /// An enabled pool.
    fn default() -> Self {
        Self::new(true)
    }
}

impl<T> fmt::Debug for InitializerPool<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InitializerPool")
            .field("enabled", &self.enabled)
            .field("stats", &self.stats())
            .finish()
    }
}

static SHARING: OnceLock<bool> = OnceLock::new();

/// Sets whether the global pools share (the EP's config, from [`DISABLE_SHARING_ENV`]); the
/// first call wins and must come before the first [`InitializerPool::global`]. Returns false
/// when the choice was made already.
pub fn configure_sharing(enabled: bool) -> bool {
    SHARING.set(enabled).is_ok()
}

/// Whether the global pools share: as configured, else on.
pub fn sharing_enabled() -> bool {
    *SHARING.get_or_init(|| true)
}

/// Parses the value of [`DISABLE_SHARING_ENV`]: `1`, `true`, `yes` or `on` (trimmed, any case).
pub fn disable_flag_set(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim();
        v == "1"
            || v.eq_ignore_ascii_case("true")
            || v.eq_ignore_ascii_case("yes")
            || v.eq_ignore_ascii_case("on")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;

    const FLOAT: i32 = 1;
    const INT32: i32 = 6;

    fn bytes(fill: u8, len: usize) -> Vec<u8> {
        vec![fill; len]
    }

    fn intern(
        pool: &InitializerPool<Vec<u8>>,
        dtype: i32,
        dims: &[i64],
        data: &[u8],
    ) -> Arc<Vec<u8>> {
        pool.get_or_insert_with(InitializerKey::new(dtype, dims, data), || {
            Ok::<_, Infallible>(data.to_vec())
        })
        .unwrap()
    }

    #[test]
    fn identity_is_content_not_name() {
        let pool = InitializerPool::new(true);
        // Two "sessions" name the tensor differently and own separate buffers.
        let from_session_a = bytes(3, 8192);
        let from_session_b = from_session_a.clone();
        let a = intern(&pool, FLOAT, &[2048], &from_session_a);
        let b = intern(&pool, FLOAT, &[2048], &from_session_b);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(pool.len_live(), 1);
        let stats = pool.stats();
        assert_eq!((stats.hits, stats.misses, stats.bypassed), (1, 1, 0));

        // Different content, same dtype and shape: a different entry.
        let other = intern(&pool, FLOAT, &[2048], &bytes(4, 8192));
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(pool.len_live(), 2);
    }

    #[test]
    fn dtype_and_shape_are_part_of_identity() {
        let pool = InitializerPool::new(true);
        let data = bytes(9, 8192);
        let f = intern(&pool, FLOAT, &[2048], &data);
        let i = intern(&pool, INT32, &[2048], &data);
        let reshaped = intern(&pool, FLOAT, &[2, 1024], &data);
        assert!(!Arc::ptr_eq(&f, &i));
        assert!(!Arc::ptr_eq(&f, &reshaped));
        assert!(!Arc::ptr_eq(&i, &reshaped));
        assert_eq!(pool.len_live(), 3);
        assert_eq!(pool.stats().misses, 3);
    }

    #[test]
    fn key_equality_and_accessors() {
        let data = bytes(1, 100);
        let k1 = InitializerKey::new(FLOAT, &[25], &data);
        let k2 = InitializerKey::new(FLOAT, &[25], &data.clone());
        assert_eq!(k1, k2);
        assert_ne!(k1, InitializerKey::new(INT32, &[25], &data));
        assert_ne!(k1, InitializerKey::new(FLOAT, &[5, 5], &data));
        assert_eq!(k1.dtype(), FLOAT);
        assert_eq!(k1.dims(), &[25]);
        assert_eq!(k1.byte_len(), 100);
        assert_eq!(k1.digest(), &<[u8; 32]>::from(Sha256::digest(&data)));
        assert!(format!("{k1:?}").contains("sha256"));
    }

    #[test]
    fn dropping_last_handle_frees_value() {
        struct Tracked(Arc<AtomicUsize>);
        impl Drop for Tracked {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }

        let drops = Arc::new(AtomicUsize::new(0));
        let pool = InitializerPool::new(true);
        let data = bytes(5, 4096);
        let key = InitializerKey::new(FLOAT, &[1024], &data);
        let make = || Ok::<_, Infallible>(Tracked(Arc::clone(&drops)));
        let a = pool.get_or_insert_with(key.clone(), make).unwrap();
        let b = pool.get_or_insert_with(key.clone(), make).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(pool.get(&key).is_some());

        drop(a);
        assert_eq!(pool.len_live(), 1);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(b);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "value freed with the last handle"
        );
        assert_eq!(pool.len_live(), 0);
        assert!(pool.get(&key).is_none());

        // The dead entry is still indexed until pruned.
        assert_eq!(pool.stats().indexed, 1);
        assert_eq!(pool.prune(), 1);
        assert_eq!(pool.stats().indexed, 0);

        // A later session rebuilds it.
        let c = pool.get_or_insert_with(key, make).unwrap();
        assert_eq!(pool.len_live(), 1);
        assert_eq!(pool.stats().misses, 2);
        drop(c);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn dead_entries_are_pruned_automatically() {
        let pool = InitializerPool::new(true);
        for i in 0..1000u32 {
            let mut data = bytes(0, 4096);
            data[..4].copy_from_slice(&i.to_le_bytes());
            drop(intern(&pool, FLOAT, &[1024], &data));
        }
        let stats = pool.stats();
        assert_eq!(stats.live, 0);
        assert!(
            stats.indexed <= MIN_PRUNE_THRESHOLD,
            "indexed = {}",
            stats.indexed
        );
    }

    #[test]
    fn small_tensors_bypass_the_pool() {
        let pool = InitializerPool::new(true);
        let data = bytes(2, MIN_SHARED_BYTES - 1);
        let a = intern(&pool, FLOAT, &[(MIN_SHARED_BYTES - 1) as i64], &data);
        let b = intern(&pool, FLOAT, &[(MIN_SHARED_BYTES - 1) as i64], &data);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(pool.len_live(), 0);
        let stats = pool.stats();
        assert_eq!(
            (stats.hits, stats.misses, stats.bypassed, stats.indexed),
            (0, 0, 2, 0)
        );

        // Exactly 4 KiB is shared.
        let data = bytes(2, MIN_SHARED_BYTES);
        let a = intern(&pool, FLOAT, &[1024], &data);
        let b = intern(&pool, FLOAT, &[1024], &data);
        assert!(Arc::ptr_eq(&a, &b));
    }

    #[test]
    fn disabled_pool_never_shares() {
        let pool = InitializerPool::new(false);
        assert!(!pool.is_enabled());
        let data = bytes(6, 1 << 16);
        let a = intern(&pool, FLOAT, &[1 << 14], &data);
        let b = intern(&pool, FLOAT, &[1 << 14], &data);
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(pool.len_live(), 0);
        assert_eq!(pool.stats().bypassed, 2);
    }

    #[test]
    fn env_flag_parsing() {
        assert!(!disable_flag_set(None));
        assert!(!disable_flag_set(Some("")));
        assert!(!disable_flag_set(Some("0")));
        assert!(!disable_flag_set(Some("false")));
        assert!(disable_flag_set(Some("1")));
        assert!(disable_flag_set(Some(" TRUE ")));
        assert!(disable_flag_set(Some("yes")));
        assert!(disable_flag_set(Some("On")));
    }

    #[test]
    fn global_pool_is_per_type_and_follows_env() {
        let bytes_pool = InitializerPool::<Vec<u8>>::global();
        assert!(std::ptr::eq(
            bytes_pool,
            InitializerPool::<Vec<u8>>::global()
        ));
        let other = InitializerPool::<String>::global();
        assert_ne!(
            std::ptr::from_ref(bytes_pool).cast::<()>(),
            std::ptr::from_ref(other).cast::<()>()
        );
        // Nothing configured it: sharing is on.
        assert!(bytes_pool.is_enabled());
        assert!(sharing_enabled());
        assert!(!configure_sharing(false), "the choice is made once");
    }

    #[test]
    fn failed_build_is_not_indexed() {
        let pool: InitializerPool<Vec<u8>> = InitializerPool::new(true);
        let data = bytes(8, 8192);
        let key = InitializerKey::new(FLOAT, &[2048], &data);
        let err = pool
            .get_or_insert_with(key.clone(), || Err("device out of memory"))
            .unwrap_err();
        assert_eq!(err, "device out of memory");
        assert_eq!(pool.len_live(), 0);
        let v = pool
            .get_or_insert_with(key, || Ok::<_, Infallible>(data.clone()))
            .unwrap();
        assert_eq!(*v, data);
        assert_eq!(pool.len_live(), 1);
    }

    #[test]
    fn concurrent_same_and_different_keys() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 200;
        const DISTINCT: u8 = 4;

        let pool: InitializerPool<Vec<u8>> = InitializerPool::new(true);
        let builds = AtomicUsize::new(0);
        let shared = bytes(0xAA, 8192);
        let distinct: Vec<Vec<u8>> = (0..DISTINCT).map(|i| bytes(i, 8192)).collect();
        let barrier = std::sync::Barrier::new(THREADS);

        type Handles = Vec<Arc<Vec<u8>>>;
        let results: Vec<(Handles, Handles)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (pool, builds, shared, distinct, barrier) =
                        (&pool, &builds, &shared, &distinct, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        let mut same = Vec::new();
                        let mut different = Vec::new();
                        for round in 0..ROUNDS {
                            let key = InitializerKey::new(FLOAT, &[2048], shared);
                            same.push(
                                pool.get_or_insert_with(key, || {
                                    builds.fetch_add(1, Ordering::SeqCst);
                                    std::thread::yield_now();
                                    Ok::<_, Infallible>(shared.clone())
                                })
                                .unwrap(),
                            );
                            let d = &distinct[(t + round) % distinct.len()];
                            let key = InitializerKey::new(INT32, &[2048], d);
                            let v = pool
                                .get_or_insert_with(key, || {
                                    builds.fetch_add(1, Ordering::SeqCst);
                                    Ok::<_, Infallible>(d.clone())
                                })
                                .unwrap();
                            assert_eq!(*v, *d);
                            different.push(v);
                        }
                        (same, different)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });

        // Every thread holds its handles, so nothing was freed: each key built exactly once.
        assert_eq!(builds.load(Ordering::SeqCst), 1 + DISTINCT as usize);
        let first = &results[0].0[0];
        for (same, different) in &results {
            assert!(same.iter().all(|v| Arc::ptr_eq(v, first)));
            for v in different {
                let canonical = pool.get(&InitializerKey::new(INT32, &[2048], v)).unwrap();
                assert!(Arc::ptr_eq(v, &canonical));
            }
        }
        assert_eq!(pool.len_live(), 1 + DISTINCT as usize);
        let stats = pool.stats();
        assert_eq!(stats.misses, 1 + DISTINCT as u64);
        assert_eq!(stats.hits + stats.misses, (THREADS * ROUNDS * 2) as u64);

        drop(results);
        assert_eq!(pool.len_live(), 0);
    }

    #[test]
    fn concurrent_churn_keeps_sharing_consistent() {
        // Threads repeatedly take and drop handles so values die and are rebuilt while others
        // look them up; any two handles alive at the same time must be the same value.
        let pool: InitializerPool<Vec<u8>> = InitializerPool::new(true);
        let data = bytes(0x55, 4096);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..500 {
                        let a = intern(&pool, FLOAT, &[1024], &data);
                        let b = intern(&pool, FLOAT, &[1024], &data);
                        assert!(Arc::ptr_eq(&a, &b));
                    }
                });
            }
        });
        assert_eq!(pool.len_live(), 0);
    }
}
