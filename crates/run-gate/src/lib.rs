//! The thread-affine run gate of a fused MLX subgraph.
//!
//! MLX streams are bound to the thread that created them, so a compiled subgraph must keep
//! running on one thread. ONNX Runtime, however, lets a caller invoke `Run` from any thread.
//! A [`RunGate`] sits in front of each subgraph and enforces the rule:
//!
//! - the first thread that [enters](RunGate::enter) the gate owns it;
//! - runs are serialised by a lock, so at most one run is inside the gate at a time;
//! - a later run from another thread gets [`RunGateError::ForeignThread`], a clear error
//!   rather than a crash;
//! - a nested run on the thread already inside the gate gets [`RunGateError::Reentrant`]
//!   instead of deadlocking.
//!
//! [`Policy::AnyThreadSerialized`] relaxes the ownership rule (any thread may run, still one
//! at a time) for backends that are not thread-affine.
//!
//! ```
//! use run_gate::{RunGate, RunGateError};
//!
//! let gate = RunGate::new();
//! {
//!     let _run = gate.enter().expect("first thread claims the gate");
//!     // ... execute the subgraph ...
//! }
//! assert_eq!(gate.owner(), Some(std::thread::current().id()));
//!
//! // Another thread is refused with a readable error.
//! std::thread::scope(|s| {
//!     let err = s.spawn(|| gate.enter().map(drop)).join().unwrap().unwrap_err();
//!     assert!(matches!(err, RunGateError::ForeignThread { .. }));
//!     assert!(err.to_string().contains("MLX streams are thread-affine"));
//! });
//! ```

use std::fmt;
use std::sync::OnceLock;
use std::thread::{self, ThreadId};

use parking_lot::{Mutex, MutexGuard};

/// Which threads may run through a [`RunGate`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Policy {
    /// The first thread that enters owns the gate; every other thread is refused.
    #[default]
    FirstThreadOwns,
    /// Any thread may enter; runs are serialised. The gate has no owner.
    AnyThreadSerialized,
}

impl Policy {
    /// Whether callers on several threads may call at the same time and all succeed (runs
    /// then wait for each other); under [`Policy::FirstThreadOwns`] all but the owner fail.
    pub fn allows_concurrent_callers(self) -> bool {
        match self {
            Policy::FirstThreadOwns => false,
            Policy::AnyThreadSerialized => true,
        }
    }
}

/// A thread, identified for error messages: its id and, if it has one, its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThreadLabel {
    /// The thread's id.
    pub id: ThreadId,
    /// The thread's name, if it was given one.
    pub name: Option<String>,
}

impl ThreadLabel {
    /// The label of the calling thread.
    pub fn current() -> Self {
        let current = thread::current();
        Self {
            id: current.id(),
            name: current.name().map(str::to_owned),
        }
    }
}

impl fmt::Display for ThreadLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "'{name}' ({:?})", self.id),
            None => write!(f, "{:?}", self.id),
        }
    }
}

/// Why [`RunGate::enter`] refused a run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunGateError {
    /// The gate is owned by another thread ([`Policy::FirstThreadOwns`]).
    ForeignThread {
        /// The thread that owns the gate.
        owner: ThreadLabel,
        /// The thread that tried to run.
        caller: ThreadLabel,
    },
    /// The calling thread is already inside the gate (a nested run of the same subgraph).
    /// Refused rather than deadlocking on the serialising lock.
    Reentrant {
        /// The thread that re-entered.
        thread: ThreadLabel,
    },
}

impl fmt::Display for RunGateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ForeignThread { owner, caller } => write!(
                f,
                "this MLX subgraph is owned by thread {owner}; ORT called Run from thread \
                 {caller}. Run each session from one thread (MLX streams are thread-affine)"
            ),
            Self::Reentrant { thread } => write!(
                f,
                "this MLX subgraph is already running on thread {thread}; a nested Run of the \
                 same subgraph is not supported"
            ),
        }
    }
}

impl std::error::Error for RunGateError {}

/// Guards the runs of one subgraph: ownership by the first thread (per [`Policy`]) and
/// serialisation of runs.
#[derive(Debug)]
pub struct RunGate {
    policy: Policy,
    /// The owning thread, set by the first [`enter`](Self::enter) under
    /// [`Policy::FirstThreadOwns`].
    owner: OnceLock<ThreadLabel>,
    /// Serialises runs.
    lock: Mutex<()>,
    /// The thread currently inside the gate, to detect re-entry. Only that thread sets it to
    /// its own id or clears it, so a caller reading its own id here is really inside.
    running: Mutex<Option<ThreadId>>,
}

impl RunGate {
    /// A gate with [`Policy::FirstThreadOwns`].
    pub fn new() -> Self {
        Self::with_policy(Policy::FirstThreadOwns)
    }

    /// A gate with the given policy.
    pub fn with_policy(policy: Policy) -> Self {
        Self {
            policy,
            owner: OnceLock::new(),
            lock: Mutex::new(()),
            running: Mutex::new(None),
        }
    }

    /// The gate's policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The owning thread: `None` before the first run, and always `None` under
    /// [`Policy::AnyThreadSerialized`].
    pub fn owner(&self) -> Option<ThreadId> {
        self.owner.get().map(|label| label.id)
    }

    /// Enters the gate for one run, blocking while another run is inside.
    ///
    /// Under [`Policy::FirstThreadOwns`] the first caller becomes the owner and any other
    /// thread gets [`RunGateError::ForeignThread`] immediately (without waiting). A thread
    /// that is already inside the gate gets [`RunGateError::Reentrant`]. The run lasts until
    /// the returned guard is dropped; the guard cannot leave the thread.
    pub fn enter(&self) -> Result<RunGuard<'_>, RunGateError> {
        let me = thread::current().id();
        if self.policy == Policy::FirstThreadOwns {
            let owner = self.owner.get_or_init(ThreadLabel::current);
            if owner.id != me {
                return Err(RunGateError::ForeignThread {
                    owner: owner.clone(),
                    caller: ThreadLabel::current(),
                });
            }
        }
        if *self.running.lock() == Some(me) {
            return Err(RunGateError::Reentrant {
                thread: ThreadLabel::current(),
            });
        }
        let lock = self.lock.lock();
        *self.running.lock() = Some(me);
        Ok(RunGuard {
            gate: self,
            _lock: lock,
        })
    }
}

impl Default for RunGate {
    /// Same as [`RunGate::new`].
    fn default() -> Self {
        Self::new()
    }
}

/// Proof that the current thread is inside a [`RunGate`]; the run ends when it is dropped.
///
/// Not `Send`: a run starts and ends on the same thread.
#[must_use = "the run ends as soon as the guard is dropped"]
pub struct RunGuard<'a> {
    gate: &'a RunGate,
    _lock: MutexGuard<'a, ()>,
}

impl fmt::Debug for RunGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunGuard")
            .field("policy", &self.gate.policy)
            .finish_non_exhaustive()
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        // Runs before `_lock` is released, so the next run never sees a stale id.
        *self.gate.running.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn owner_runs_repeatedly() {
        let gate = RunGate::new();
        assert_eq!(gate.policy(), Policy::FirstThreadOwns);
        assert_eq!(gate.owner(), None);
        for _ in 0..100 {
            let guard = gate.enter().unwrap();
            drop(guard);
        }
        assert_eq!(gate.owner(), Some(thread::current().id()));
    }

    #[test]
    fn foreign_thread_gets_error() {
        let gate = RunGate::new();
        drop(gate.enter().unwrap());
        let owner = thread::current().id();

        let err = thread::scope(|s| {
            thread::Builder::new()
                .name("ort-worker".into())
                .spawn_scoped(s, || gate.enter().map(drop))
                .unwrap()
                .join()
                .unwrap()
        })
        .unwrap_err();

        match &err {
            RunGateError::ForeignThread { owner: o, caller } => {
                assert_eq!(o.id, owner);
                assert_ne!(caller.id, owner);
                assert_eq!(caller.name.as_deref(), Some("ort-worker"));
            }
            other => panic!("unexpected error {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.starts_with("this MLX subgraph is owned by thread "),
            "{msg}"
        );
        assert!(
            msg.contains("ORT called Run from thread 'ort-worker' (ThreadId("),
            "{msg}"
        );
        assert!(msg.ends_with("(MLX streams are thread-affine)"), "{msg}");

        // The owner is unaffected.
        assert!(gate.enter().is_ok());
        assert_eq!(gate.owner(), Some(owner));
    }

    #[test]
    fn foreign_thread_is_refused_while_owner_runs() {
        // The refusal is immediate, not after waiting for the owner's run.
        let gate = RunGate::new();
        let _run = gate.enter().unwrap();
        let result = thread::scope(|s| s.spawn(|| gate.enter().map(drop)).join().unwrap());
        assert!(matches!(result, Err(RunGateError::ForeignThread { .. })));
    }

    #[test]
    fn first_thread_to_enter_owns_not_the_creator() {
        let gate = RunGate::new();
        let worker = thread::scope(|s| {
            s.spawn(|| {
                drop(gate.enter().unwrap());
                thread::current().id()
            })
            .join()
            .unwrap()
        });
        assert_eq!(gate.owner(), Some(worker));
        assert!(matches!(
            gate.enter(),
            Err(RunGateError::ForeignThread { .. })
        ));
    }

    #[test]
    fn racing_first_runs_have_one_owner() {
        let gate = RunGate::new();
        let ok = AtomicUsize::new(0);
        let barrier = std::sync::Barrier::new(8);
        thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    barrier.wait();
                    match gate.enter() {
                        Ok(_run) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(RunGateError::ForeignThread { .. }) => {}
                        Err(e) => panic!("unexpected {e}"),
                    }
                });
            }
        });
        assert_eq!(ok.load(Ordering::SeqCst), 1);
        assert!(gate.owner().is_some());
    }

    #[test]
    fn reentry_is_an_error_not_a_deadlock() {
        for policy in [Policy::FirstThreadOwns, Policy::AnyThreadSerialized] {
            let gate = RunGate::with_policy(policy);
            let outer = gate.enter().unwrap();
            let err = gate.enter().unwrap_err();
            assert_eq!(
                err,
                RunGateError::Reentrant {
                    thread: ThreadLabel::current()
                }
            );
            assert!(err.to_string().contains("nested Run"), "{err}");
            drop(outer);
            // After the outer run ends the thread can run again.
            drop(gate.enter().unwrap());
        }
    }

    #[test]
    fn any_thread_serialized_never_overlaps() {
        let gate = RunGate::with_policy(Policy::AnyThreadSerialized);
        let inside = AtomicBool::new(false);
        let runs = AtomicUsize::new(0);
        thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for i in 0..200 {
                        let _run = gate.enter().unwrap();
                        assert!(!inside.swap(true, Ordering::SeqCst), "runs overlapped");
                        if i % 50 == 0 {
                            thread::sleep(Duration::from_millis(1));
                        } else {
                            thread::yield_now();
                        }
                        runs.fetch_add(1, Ordering::SeqCst);
                        inside.store(false, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 400);
        assert_eq!(gate.owner(), None);
    }

    #[test]
    fn thread_label_display() {
        let id = thread::current().id();
        let named = ThreadLabel {
            id,
            name: Some("main".into()),
        };
        assert_eq!(named.to_string(), format!("'main' ({id:?})"));
        let unnamed = ThreadLabel { id, name: None };
        assert_eq!(unnamed.to_string(), format!("{id:?}"));
    }

    #[test]
    fn gate_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<RunGate>();
        assert_send_sync::<RunGateError>();
        assert_eq!(RunGate::default().policy(), Policy::FirstThreadOwns);
    }
}
