//! Compiled execution: a plan traced into an MLX closure and compiled with `mlx_compile`.
//!
//! Three slots, as in the reference system:
//! - **decode** (an `input_ids` of sequence length 1 and a plan whose steps are all
//!   shape-polymorphic): one shapeless compiled closure serves every step of every generation;
//! - **prefill** (sequence length > 1): compiled per input-shape key;
//! - **general** (everything else): compiled per input-shape key.
//!
//! Keyed caches are bounded and evict the least recently used entry. A decode-shaped run of a
//! plan that is not shapeless runs eagerly: compiling per shape would recompile every token.
//! `ORTMLX_DISABLE_COMPILE=1` turns all slots off; `ORTMLX_DISABLE_COMPILE_{DECODE,PREFILL,
//! GENERAL}=1` turn one off. Results are identical either way; only the speed differs.

use std::sync::Arc;

use mlx::{Array, Closure, Device, Stream};
use onnx_ir::TensorData;
use plan::{CompileClass, Slot};

use crate::{DeviceKind, Program, RuntimeError};

/// The compiled slot a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompileSlot {
    /// Sequence length 1, shapeless compile.
    Decode,
    /// Sequence length > 1, keyed by input shapes.
    Prefill,
    /// Any other plan, keyed by input shapes.
    General,
}

impl CompileSlot {
    fn env_switch(self) -> &'static str {
        match self {
            CompileSlot::Decode => "ORTMLX_DISABLE_COMPILE_DECODE",
            CompileSlot::Prefill => "ORTMLX_DISABLE_COMPILE_PREFILL",
            CompileSlot::General => "ORTMLX_DISABLE_COMPILE_GENERAL",
        }
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Counters of a compiled cache, for tests and diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Runs served by an already compiled closure.
    pub hits: u64,
    /// Closures compiled.
    pub compiles: u64,
    /// Closures evicted from a keyed cache.
    pub evictions: u64,
    /// Runs that went eager although compiling was enabled (decode of a shape-keyed plan).
    pub eager_fallbacks: u64,
    /// Closures held now (all slots).
    pub held: usize,
}

/// A small least-recently-used map (linear scan: capacities are single digits).
struct Lru<K, V> {
    capacity: usize,
    entries: Vec<(K, V)>,
}

impl<K: PartialEq, V> Lru<K, V> {
    fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            entries: Vec::new(),
        }
    }

    /// Moves the entry to the front and returns it.
    fn get(&mut self, key: &K) -> Option<&V> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        let entry = self.entries.remove(i);
        self.entries.insert(0, entry);
        self.entries.first().map(|(_, v)| v)
    }

    /// Inserts at the front; returns true when an entry was evicted.
    fn insert(&mut self, key: K, value: V) -> bool {
        self.entries.insert(0, (key, value));
        if self.entries.len() > self.capacity {
            self.entries.pop();
            return true;
        }
        false
    }
}

/// Input shapes (and host-program values, which derive from them) identify a compiled trace.
type ShapeKey = Vec<Vec<i64>>;

/// The compiled closures of one executable.
pub(crate) struct CompiledCache {
    enabled: bool,
    class: CompileClass,
    seq_input: Option<usize>,
    decode: Option<Closure>,
    prefill: Lru<ShapeKey, Closure>,
    general: Lru<ShapeKey, Closure>,
    stats: CacheStats,
}

/// Default capacity of the prefill cache.
pub const PREFILL_CAPACITY: usize = 4;
/// Default capacity of the general cache.
pub const GENERAL_CAPACITY: usize = 8;

impl CompiledCache {
    /// A cache for `program`; `enabled` is the session's choice (environment switches apply too).
    pub(crate) fn new(program: &Program, enabled: bool, capacity: Option<usize>) -> Self {
        let seq_input =
            program.plan.inputs.iter().position(|i| {
                i.name == "input_ids" && i.shape.as_ref().is_some_and(|s| s.len() == 2)
            });
        CompiledCache {
            enabled: enabled && !env_flag("ORTMLX_DISABLE_COMPILE"),
            class: program.plan.compile_class(),
            seq_input,
            decode: None,
            prefill: Lru::new(capacity.unwrap_or(PREFILL_CAPACITY)),
            general: Lru::new(capacity.unwrap_or(GENERAL_CAPACITY)),
            stats: CacheStats::default(),
        }
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> CacheStats {
        let held =
            self.decode.iter().count() + self.prefill.entries.len() + self.general.entries.len();
        CacheStats { held, ..self.stats }
    }

    /// The slot a run with these input shapes uses, or `None` to run eagerly.
    pub(crate) fn slot_for(&mut self, shapes: &[Vec<i64>]) -> Option<CompileSlot> {
        if !self.enabled || self.class == CompileClass::Eager {
            return None;
        }
        let slot = match self
            .seq_input
            .and_then(|i| shapes.get(i))
            .and_then(|s| s.get(1))
        {
            Some(1) if self.class == CompileClass::Shapeless => CompileSlot::Decode,
            Some(1) => {
                self.stats.eager_fallbacks += 1;
                return None;
            }
            Some(_) => CompileSlot::Prefill,
            None => CompileSlot::General,
        };
        (!env_flag(slot.env_switch())).then_some(slot)
    }

    /// Runs the compiled trace for `slot`, compiling it first when needed.
    pub(crate) fn run(
        &mut self,
        slot: CompileSlot,
        program: &Arc<Program>,
        device: DeviceKind,
        inputs: &[Array],
        host: Vec<(Slot, TensorData)>,
        shapes: Vec<Vec<i64>>,
    ) -> Result<Vec<Array>, RuntimeError> {
        let refs: Vec<&Array> = inputs.iter().collect();
        let closure = match slot {
            CompileSlot::Decode => {
                if self.decode.is_none() {
                    self.decode = Some(compile(program, device, host, true)?);
                    self.stats.compiles += 1;
                } else {
                    self.stats.hits += 1;
                }
                self.decode.as_ref()
            }
            CompileSlot::Prefill | CompileSlot::General => {
                let cache = if slot == CompileSlot::Prefill {
                    &mut self.prefill
                } else {
                    &mut self.general
                };
                if cache.get(&shapes).is_none() {
                    let closure = compile(program, device, host, false)?;
                    self.stats.compiles += 1;
                    if cache.insert(shapes.clone(), closure) {
                        self.stats.evictions += 1;
                    }
                } else {
                    self.stats.hits += 1;
                }
                cache.get(&shapes)
            }
        };
        let closure = closure.ok_or_else(|| RuntimeError("compiled closure missing".into()))?;
        closure.apply(&refs).map_err(Into::into)
    }
}

/// Traces the program into a closure and compiles it.
fn compile(
    program: &Arc<Program>,
    device: DeviceKind,
    host: Vec<(Slot, TensorData)>,
    shapeless: bool,
) -> Result<Closure, RuntimeError> {
    let program = Arc::clone(program);
    let closure = Closure::new(move |args: &[Array]| {
        let stream = Stream::default_for(&match device {
            DeviceKind::Gpu => Device::gpu(),
            DeviceKind::Cpu => Device::cpu(),
        })?;
        program
            .trace(args.to_vec(), &host, &stream)
            .map_err(|e| mlx::Error::new(e.0))
    });
    closure.compile(shapeless).map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut lru = Lru::new(2);
        assert!(!lru.insert(1, "a"));
        assert!(!lru.insert(2, "b"));
        assert_eq!(lru.get(&1), Some(&"a"));
        assert!(lru.insert(3, "c"));
        assert_eq!(lru.get(&2), None, "2 was least recently used");
        assert_eq!(lru.get(&1), Some(&"a"));
        assert_eq!(lru.get(&3), Some(&"c"));
    }
}
