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
use plan::{CompileClass, DecodeKey};

use crate::{DeviceKind, HostBinding, Program, RuntimeError};

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
    /// Whether the config turns this slot off (`ORTMLX_DISABLE_COMPILE_{DECODE,PREFILL,GENERAL}`).
    fn disabled(self) -> bool {
        let c = crate::config();
        match self {
            CompileSlot::Decode => c.disable_compile_decode,
            CompileSlot::Prefill => c.disable_compile_prefill,
            CompileSlot::General => c.disable_compile_general,
        }
    }
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

/// What identifies a shape-keyed compiled trace: the input shapes and the values that steps
/// read on the host (host-program results and input values that shape the MLX calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShapeKey {
    shapes: Vec<Vec<i64>>,
    read_values: Vec<Vec<u8>>,
}

/// The slot and cache key a run uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlotChoice {
    /// The shapeless decode closure for this decode key (see `Plan::decode_key`).
    Decode(DecodeKey),
    /// A shape-keyed closure of the prefill or general cache.
    Keyed(CompileSlot, ShapeKey),
}

impl SlotChoice {
    /// Which slot serves the run.
    pub(crate) fn kind(&self) -> CompileSlot {
        match self {
            SlotChoice::Decode(_) => CompileSlot::Decode,
            SlotChoice::Keyed(slot, _) => *slot,
        }
    }
}

/// How many decode closures an executable keeps (one per batch size and query length in
/// use; a generation uses one).
const DECODE_CAPACITY: usize = 4;

/// How many decode closures one executable compiles before its decode runs go eager: a
/// plan whose decode key changes every token would otherwise recompile every token.
const MAX_DECODE_COMPILES: usize = 8;

/// The compiled closures of one executable.
pub(crate) struct CompiledCache {
    enabled: bool,
    /// Only the decode slot compiles (the CPU's default); other runs go eager.
    decode_only: bool,
    class: CompileClass,
    /// `Plan::decode_compilable`: some decode runs of a shape-keyed plan can share one
    /// shapeless closure.
    decode_compilable: bool,
    seq_input: Option<usize>,
    decode: Lru<DecodeKey, Closure>,
    /// Decode keys whose closure would depend on the past length (see `probe`): their runs
    /// go eager.
    decode_refused: Vec<DecodeKey>,
    /// Decode closures compiled so far (see [`MAX_DECODE_COMPILES`]).
    decode_compiles: usize,
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
        let class = program.plan.compile_class();
        CompiledCache {
            enabled: enabled && !crate::config().disable_compile,
            decode_only: false,
            class,
            decode_compilable: class != CompileClass::Eager && program.plan.decode_compilable(),
            seq_input,
            decode: Lru::new(DECODE_CAPACITY),
            decode_refused: Vec::new(),
            decode_compiles: 0,
            prefill: Lru::new(capacity.unwrap_or(PREFILL_CAPACITY)),
            general: Lru::new(capacity.unwrap_or(GENERAL_CAPACITY)),
            stats: CacheStats::default(),
        }
    }

    /// Compiles the decode slot only; every other run goes eager.
    pub(crate) fn decode_only(&mut self) {
        self.decode_only = true;
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> CacheStats {
        let held =
            self.decode.entries.len() + self.prefill.entries.len() + self.general.entries.len();
        CacheStats { held, ..self.stats }
    }

    /// The slot a run with these input shapes and host values uses, or `None` to run eagerly.
    pub(crate) fn slot_for(
        &mut self,
        program: &Program,
        shapes: &[Vec<i64>],
        host: &HostBinding,
    ) -> Option<SlotChoice> {
        if !self.enabled || self.class == CompileClass::Eager {
            return None;
        }
        let keyed = |slot| {
            SlotChoice::Keyed(
                slot,
                ShapeKey {
                    shapes: shapes.to_vec(),
                    read_values: host.read_values(&program.host_read_slots),
                },
            )
        };
        let choice = match self
            .seq_input
            .and_then(|i| shapes.get(i))
            .and_then(|s| s.get(1))
        {
            Some(1) if self.class == CompileClass::Shapeless => {
                SlotChoice::Decode(DecodeKey::default())
            }
            Some(1) => match self
                .decode_compilable
                .then(|| program.plan.decode_key(shapes, host))
                .flatten()
                .filter(|key| !self.decode_refused.contains(key))
            {
                Some(key) => SlotChoice::Decode(key),
                None => {
                    self.stats.eager_fallbacks += 1;
                    return None;
                }
            },
            Some(_) if self.decode_only => return None,
            Some(_) => keyed(CompileSlot::Prefill),
            None if self.decode_only => return None,
            None => keyed(CompileSlot::General),
        };
        (!choice.kind().disabled()).then_some(choice)
    }

    /// True when the decode closure for `key` is compiled, or may be: for a key with layout
    /// steps, the first run checks (see `probe`) that no step that is not shape-polymorphic
    /// depends on the past length; a key that fails is remembered and its runs go eager.
    pub(crate) fn decode_allowed(
        &mut self,
        key: &DecodeKey,
        program: &Program,
        inputs: &[Array],
        host: &HostBinding,
        shapes: &[Vec<i64>],
        s: &Stream,
    ) -> Result<bool, RuntimeError> {
        if self.decode.entries.iter().any(|(k, _)| k == key) {
            return Ok(true);
        }
        if self.decode_compiles >= MAX_DECODE_COMPILES {
            if self.decode_compiles == MAX_DECODE_COMPILES {
                log::info!(
                    "{MAX_DECODE_COMPILES} decode closures compiled: decode keys keep changing \
                     (values read on the host differ from token to token); decode runs go eager"
                );
                self.decode_compiles += 1;
            }
            self.stats.eager_fallbacks += 1;
            return Ok(false);
        }
        if key.layout.is_empty()
            || crate::probe::past_independent(program, key, inputs, host, shapes, s)?
        {
            self.decode_compiles += 1;
            return Ok(true);
        }
        log::info!(
            "decode closure refused for {key:?}: a step that is not shape-polymorphic depends \
             on the past length; these runs go eager"
        );
        if self.decode_refused.len() >= DECODE_CAPACITY {
            self.decode_refused.remove(0);
        }
        self.decode_refused.push(key.clone());
        self.stats.eager_fallbacks += 1;
        Ok(false)
    }

    /// Runs the compiled trace for `choice`, compiling it first when needed.
    pub(crate) fn run(
        &mut self,
        choice: SlotChoice,
        program: &Arc<Program>,
        device: DeviceKind,
        inputs: &[Array],
        host: HostBinding,
    ) -> Result<Vec<Array>, RuntimeError> {
        let host_arrays = host.result_arrays()?;
        let mut args: Vec<&Array> = inputs.iter().collect();
        args.extend(host_arrays.iter());
        let closure = match choice {
            SlotChoice::Decode(key) => cached(&mut self.decode, &mut self.stats, key, || {
                compile(program, device, host, true)
            })?,
            SlotChoice::Keyed(slot, key) => {
                let cache = if slot == CompileSlot::Prefill {
                    &mut self.prefill
                } else {
                    &mut self.general
                };
                cached(cache, &mut self.stats, key, || {
                    compile(program, device, host, false)
                })?
            }
        };
        closure.apply(&args).map_err(Into::into)
    }
}

/// The closure of `cache` for `key`, compiled by `make` when missing.
fn cached<'c, K: PartialEq + Clone>(
    cache: &'c mut Lru<K, Closure>,
    stats: &mut CacheStats,
    key: K,
    make: impl FnOnce() -> Result<Closure, RuntimeError>,
) -> Result<&'c Closure, RuntimeError> {
    if cache.get(&key).is_none() {
        let closure = make()?;
        stats.compiles += 1;
        if cache.insert(key.clone(), closure) {
            stats.evictions += 1;
        }
    } else {
        stats.hits += 1;
    }
    cache
        .get(&key)
        .ok_or_else(|| RuntimeError("compiled closure missing".into()))
}

/// Traces the program into a closure and compiles it. The closure takes the plan's inputs,
/// then the arrays of the host program's results; `host` (this run's) gives the host values
/// that shape the trace.
fn compile(
    program: &Arc<Program>,
    device: DeviceKind,
    host: HostBinding,
    shapeless: bool,
) -> Result<Closure, RuntimeError> {
    let program = Arc::clone(program);
    let closure = Closure::new(move |args: &[Array]| {
        let stream = Stream::default_for(&match device {
            DeviceKind::Gpu => Device::gpu(),
            DeviceKind::Cpu => Device::cpu(),
        })?;
        let n = program.plan.inputs.len().min(args.len());
        program
            .trace(args[..n].to_vec(), &host, Some(args[n..].to_vec()), &stream)
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
