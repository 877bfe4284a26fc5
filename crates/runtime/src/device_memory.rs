//! The EP's device memory: MLX buffers lent to ONNX Runtime as allocations and found again by
//! their data pointer.
//!
//! Every block handed out is an evaluated MLX array, kept in a process-wide registry keyed by
//! its data pointer for as long as the allocation lives. A run whose input lies in a block binds
//! a view of that array instead of copying the bytes (`bind_input`), and a run's output can
//! *become* the block ORT allocates for it: [`offer_output`] arms the calling thread with the
//! computed array, and the next [`alloc`] of exactly its size on that thread returns the array's
//! own buffer ([`withdraw_offer`] disarms it). So a tensor that stays in this memory (a KV cache
//! fed back through IOBinding) is never copied.
//!
//! On MLX's CPU backend the blocks are host memory; on the CUDA backend MLX allocates CUDA
//! managed memory (one address for host and device); either way a host `memcpy` into or out of
//! an evaluated block is seen by the next MLX op, which is what the data transfer relies on.
//!
//! Safety rules kept here:
//! - the registry holds a reference to every block's array, so MLX never donates (writes) a
//!   lent buffer as an op's output, and the buffer outlives every ORT value over it, whatever
//!   session or allocator made it;
//! - an output is lent only when its bytes overlap no lent block and no constant of the plan
//!   (a reshaped initializer shares the initializer's buffer, which ORT must never write).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use mlx::{Array, Dtype, Stream};
use parking_lot::Mutex;

use crate::dtype::to_mlx;
use crate::{InputTensor, OutputTensor, RuntimeError};

/// One lent block: the array whose buffer it is, and its length in bytes.
struct Block {
    array: Array,
    len: usize,
}

/// The live blocks by start address.
static BLOCKS: Mutex<BTreeMap<usize, Block>> = Mutex::new(BTreeMap::new());

/// Counters of the device memory since the process started (see [`stats`]).
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ADOPTED: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The output offered to the next allocation on this thread: (start, length, array).
    static OFFER: RefCell<Option<(usize, usize, Array)>> = const { RefCell::new(None) };
}

/// Counters of the EP's device memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceMemoryStats {
    /// Blocks allocated fresh (zero-filled MLX arrays).
    pub allocs: u64,
    /// Blocks that were a run's output array (no copy).
    pub adopted: u64,
    /// Blocks freed.
    pub frees: u64,
    /// Blocks live now.
    pub live_blocks: usize,
    /// Bytes in live blocks.
    pub live_bytes: usize,
}

/// The counters so far.
pub fn stats() -> DeviceMemoryStats {
    let blocks = BLOCKS.lock();
    DeviceMemoryStats {
        allocs: ALLOCS.load(Ordering::Relaxed),
        adopted: ADOPTED.load(Ordering::Relaxed),
        frees: FREES.load(Ordering::Relaxed),
        live_blocks: blocks.len(),
        live_bytes: blocks.values().map(|b| b.len).sum(),
    }
}

/// The start address of an array's (evaluated, row-contiguous) bytes, and their length.
fn extent(array: &Array) -> Result<(usize, usize), RuntimeError> {
    let bytes = array.as_bytes()?;
    Ok((bytes.as_ptr() as usize, bytes.len()))
}

/// True when `[start, start + len)` overlaps a live block.
fn overlaps_block(blocks: &BTreeMap<usize, Block>, start: usize, len: usize) -> bool {
    let end = start.saturating_add(len.max(1));
    // the last block starting before `end` is the only one that can reach into the range
    blocks
        .range(..end)
        .next_back()
        .is_some_and(|(&s, b)| s.saturating_add(b.len.max(1)) > start)
}

/// Allocates `size` bytes of device memory (at least one byte is reserved, so every block has
/// its own address). Takes the output offered on this thread when its size matches.
pub fn alloc(size: usize) -> Result<*mut u8, RuntimeError> {
    if let Some((start, len, array)) = OFFER.with(|o| o.borrow_mut().take()) {
        if len == size {
            let mut blocks = BLOCKS.lock();
            if !overlaps_block(&blocks, start, len) {
                blocks.insert(start, Block { array, len });
                ADOPTED.fetch_add(1, Ordering::Relaxed);
                return Ok(start as *mut u8);
            }
        } else {
            OFFER.with(|o| *o.borrow_mut() = Some((start, len, array)));
        }
    }
    let n = size.max(1);
    let shape = [i32::try_from(n)
        .map_err(|_| RuntimeError(format!("{size} bytes exceed MLX's array size limit")))?];
    // Zero bytes from the allocator (calloc'd pages; large ones are mapped lazily) copied into
    // a new MLX buffer: no stream or evaluation is involved, so any thread may allocate.
    let zeros = vec![0u8; n];
    let array = Array::from_bytes(&zeros, &shape, Dtype::Uint8)?;
    drop(zeros);
    let (start, _) = extent(&array)?;
    let mut blocks = BLOCKS.lock();
    if blocks.contains_key(&start) {
        return Err(RuntimeError(format!(
            "MLX returned the address {start:#x} of a live block"
        )));
    }
    blocks.insert(start, Block { array, len: size });
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    Ok(start as *mut u8)
}

/// Frees a block from [`alloc`]; false when `ptr` is not a live block (nothing is freed).
pub fn free(ptr: *mut u8) -> bool {
    let removed = BLOCKS.lock().remove(&(ptr as usize));
    let found = removed.is_some();
    if found {
        FREES.fetch_add(1, Ordering::Relaxed);
    }
    // the array (maybe the last reference to its buffer) is dropped outside the lock
    drop(removed);
    found
}

/// True when `[ptr, ptr + len)` lies inside one live block.
pub fn contains(ptr: *const u8, len: usize) -> bool {
    find(ptr as usize, len).is_some()
}

/// The block holding `[start, start + len)`: its array and the range's offset in it.
fn find(start: usize, len: usize) -> Option<(Array, usize, usize)> {
    let blocks = BLOCKS.lock();
    let (&s, b) = blocks.range(..=start).next_back()?;
    let off = start - s;
    (off.checked_add(len)? <= b.len).then(|| (b.array.clone(), off, b.len))
}

/// True when a run binds this input without copying: it lies in a block and MLX holds its
/// element type as the same bytes (the packed sub-byte types are unpacked, so they copy).
pub fn can_bind(tensor: &InputTensor<'_>) -> bool {
    !tensor.data.is_empty()
        && tensor.dtype.packed_bits().is_none()
        && to_mlx(tensor.dtype).is_ok()
        && contains(tensor.data.as_ptr(), tensor.data.len())
}

/// The array of an input that lies in a block, as a view of the block's buffer (no copy);
/// `None` when it does not (the caller copies).
pub(crate) fn bind_input(
    tensor: &InputTensor<'_>,
    shape: &[i32],
    s: &Stream,
) -> Result<Option<Array>, RuntimeError> {
    if tensor.data.is_empty() || tensor.dtype.packed_bits().is_some() {
        return Ok(None);
    }
    let Ok(dtype) = to_mlx(tensor.dtype) else {
        return Ok(None);
    };
    let Some((block, off, block_len)) = find(tensor.data.as_ptr() as usize, tensor.data.len())
    else {
        return Ok(None);
    };
    let len = tensor.data.len();
    if off == 0 && len == block_len && block.dtype() == dtype {
        let same_shape = block.shape() == shape;
        return Ok(Some(if same_shape {
            block
        } else {
            mlx::ops::reshape(&block, shape, s)?
        }));
    }
    // The range as bytes: the whole block flattened to uint8, sliced, reinterpreted. Every
    // step is a view of the same buffer once evaluated.
    let flat = mlx::ops::reshape(&block, &[-1], s)?;
    let bytes = if block.dtype() == Dtype::Uint8 {
        flat
    } else {
        mlx::ops::view(&flat, Dtype::Uint8, s)?
    };
    let to_i32 = |v: usize| {
        i32::try_from(v).map_err(|_| RuntimeError(format!("offset {v} exceeds MLX's range")))
    };
    let ranged = if off == 0 && len == bytes.size() {
        bytes
    } else {
        mlx::ops::slice(&bytes, &[to_i32(off)?], &[to_i32(off + len)?], &[1], s)?
    };
    let typed = if dtype == Dtype::Uint8 {
        ranged
    } else {
        mlx::ops::view(&ranged, dtype, s)?
    };
    Ok(Some(mlx::ops::reshape(&typed, shape, s)?))
}

/// Offers `output` to the next [`alloc`] on this thread when it may become an ORT allocation:
/// its bytes are MLX's own (not packed), overlap no lent block, and none of `protected`
/// (start, length) ranges (the plan's constants). Returns whether it was offered.
pub fn offer_output(output: &OutputTensor, protected: &[(usize, usize)]) -> bool {
    withdraw_offer();
    if output.packed.is_some() {
        return false;
    }
    let Ok((start, len)) = extent(&output.array) else {
        return false;
    };
    if len == 0 {
        return false;
    }
    let end = start + len;
    if protected
        .iter()
        .any(|&(s, l)| s < end && start < s + l.max(1))
    {
        return false;
    }
    if overlaps_block(&BLOCKS.lock(), start, len) {
        return false;
    }
    OFFER.with(|o| *o.borrow_mut() = Some((start, len, output.array.clone())));
    true
}

/// Clears this thread's offer; true when it was still there (no allocation took it).
pub fn withdraw_offer() -> bool {
    OFFER.with(|o| o.borrow_mut().take()).is_some()
}

/// The start of an output's bytes (what an allocation that adopted it returned).
pub fn output_address(output: &OutputTensor) -> Option<*const u8> {
    if output.packed.is_some() {
        return None;
    }
    extent(&output.array).ok().map(|(s, _)| s as *const u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_ir::DataType;

    #[test]
    fn blocks_are_found_by_address_and_freed_once() {
        crate::init().unwrap();
        let p = alloc(64).unwrap();
        assert!(contains(p, 64));
        assert!(contains(p.wrapping_add(8), 16));
        assert!(!contains(p.wrapping_add(60), 8));
        // SAFETY: 64 zeroed bytes of a live block.
        let bytes = unsafe { std::slice::from_raw_parts(p, 64) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert!(free(p));
        assert!(!free(p));
        assert!(!contains(p, 1));
        let z = alloc(0).unwrap();
        assert!(!z.is_null());
        assert!(free(z));
    }

    #[test]
    fn many_sizes_allocated_and_freed_from_other_threads() {
        crate::init().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<(usize, usize, u8)>();
        let makers: Vec<_> = (0..4u8)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..200usize {
                        let size = (i * 37 + t as usize * 11) % 5000;
                        let p = alloc(size).unwrap();
                        // SAFETY: `size` writable bytes of a live block.
                        unsafe { std::ptr::write_bytes(p, t + 1, size) };
                        tx.send((p as usize, size, t + 1)).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let freer = std::thread::spawn(move || {
            let mut n = 0;
            for (p, size, fill) in rx {
                // SAFETY: the block is live until freed below.
                let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, size) };
                assert!(
                    bytes.iter().all(|&b| b == fill),
                    "block {p:#x} was overwritten"
                );
                assert!(free(p as *mut u8));
                n += 1;
            }
            n
        });
        for m in makers {
            m.join().unwrap();
        }
        assert_eq!(freer.join().unwrap(), 800);
    }

    #[test]
    fn an_offered_output_becomes_the_next_allocation_of_its_size() {
        crate::init().unwrap();
        let array = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        let out = OutputTensor {
            dtype: DataType::Float,
            dims: vec![3],
            array: array.clone(),
            packed: None,
        };
        let (start, len) = extent(&array).unwrap();
        // a constant's bytes are never lent
        assert!(!offer_output(&out, &[(start + 4, 4)]));
        assert!(offer_output(&out, &[]));
        let other = alloc(5).unwrap();
        assert_ne!(
            other as usize, start,
            "a different size does not take the offer"
        );
        let p = alloc(len).unwrap();
        assert_eq!(p as usize, start);
        assert_eq!(output_address(&out), Some(p as *const u8));
        assert!(!withdraw_offer(), "taken");
        // the same bytes can't be lent twice
        assert!(!offer_output(&out, &[]));
        drop(out);
        drop(array);
        // the block keeps the buffer alive
        // SAFETY: 12 bytes of a live block.
        let v = unsafe { std::slice::from_raw_parts(p as *const f32, 3) };
        assert_eq!(v, &[1.0, 2.0, 3.0]);
        assert!(free(p));
        assert!(free(other));
        assert!(offer_output(
            &OutputTensor {
                dtype: DataType::Float,
                dims: vec![3],
                array: Array::from_slice(&[0.0f32; 3], &[3]).unwrap(),
                packed: None,
            },
            &[]
        ));
        assert!(withdraw_offer(), "not taken");
    }

    #[test]
    fn a_bound_input_reads_the_block_in_place() {
        crate::init().unwrap();
        let s = Stream::default_cpu();
        let p = alloc(24).unwrap();
        let values = [1.5f32, -2.0, 3.25, 4.0, 0.5, 6.0];
        // SAFETY: 24 writable bytes of a live block.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, p, 24) };
        // SAFETY: as above.
        let data = unsafe { std::slice::from_raw_parts(p as *const u8, 24) };
        let t = InputTensor {
            dtype: DataType::Float,
            dims: &[2, 3],
            data,
        };
        assert!(can_bind(&t));
        let a = bind_input(&t, &[2, 3], &s).unwrap().unwrap();
        assert_eq!(a.shape(), vec![2, 3]);
        assert_eq!(a.to_vec::<f32>().unwrap(), values.to_vec());
        a.eval().unwrap();
        assert_eq!(extent(&a).unwrap().0, p as usize, "a view, not a copy");
        // an interior range: elements 2..4
        // SAFETY: 8 bytes inside the block.
        let inner = unsafe { std::slice::from_raw_parts(p.add(8) as *const u8, 8) };
        let t = InputTensor {
            dtype: DataType::Float,
            dims: &[2],
            data: inner,
        };
        let a = bind_input(&t, &[2], &s).unwrap().unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), vec![3.25, 4.0]);
        drop(a);
        assert!(free(p));
    }
}
