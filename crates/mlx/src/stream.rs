//! Devices and streams.

use mlx_sys as sys;

use crate::error::{Result, check, install_error_handler};

/// Kind of device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    /// The host CPU.
    Cpu,
    /// A GPU (Metal on Apple Silicon, CUDA on NVIDIA).
    Gpu,
}

/// An MLX device handle.
pub struct Device {
    pub(crate) raw: sys::mlx_device,
}

// SAFETY: a device handle is an immutable description of a device.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: `raw` is owned by this handle.
        unsafe { sys::mlx_device_free(self.raw) };
    }
}

impl Device {
    /// Device `index` of the given type (existence is checked by [`Device::is_available`]).
    pub fn new(kind: DeviceType, index: i32) -> Device {
        install_error_handler();
        let t = match kind {
            DeviceType::Cpu => sys::MLX_CPU,
            DeviceType::Gpu => sys::MLX_GPU,
        };
        // SAFETY: plain constructor.
        Device {
            raw: unsafe { sys::mlx_device_new_type(t, index) },
        }
    }

    /// The CPU device.
    pub fn cpu() -> Device {
        Device::new(DeviceType::Cpu, 0)
    }

    /// The first GPU device (use [`Device::is_available`] before streaming to it).
    pub fn gpu() -> Device {
        Device::new(DeviceType::Gpu, 0)
    }

    /// True when the linked MLX has a backend for this device and the device exists.
    pub fn is_available(&self) -> bool {
        let mut avail = false;
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::mlx_device_is_available(&mut avail, self.raw) }).is_ok() && avail
    }

    /// The device's type.
    pub fn device_type(&self) -> Result<DeviceType> {
        let mut t = sys::MLX_CPU;
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::mlx_device_get_type(&mut t, self.raw) })?;
        Ok(if t == sys::MLX_GPU {
            DeviceType::Gpu
        } else {
            DeviceType::Cpu
        })
    }
}

/// True when MLX can run on a GPU here (CUDA or Metal backend and a device present).
pub fn gpu_available() -> bool {
    Device::gpu().is_available()
}

/// An MLX stream: a queue of work on one device.
///
/// `Send` but not `Sync`: MLX expects one thread at a time to enqueue on a stream.
pub struct Stream {
    pub(crate) raw: sys::mlx_stream,
}

// SAFETY: the handle may move between threads; it is used from one thread at a time.
unsafe impl Send for Stream {}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: `raw` is owned by this handle.
        unsafe { sys::mlx_stream_free(self.raw) };
    }
}

impl Stream {
    /// A new stream on `device`.
    pub fn new(device: &Device) -> Stream {
        install_error_handler();
        // SAFETY: valid device handle.
        Stream {
            raw: unsafe { sys::mlx_stream_new_device(device.raw) },
        }
    }

    /// The default stream of the CPU.
    pub fn default_cpu() -> Stream {
        install_error_handler();
        // SAFETY: plain constructor.
        Stream {
            raw: unsafe { sys::mlx_default_cpu_stream_new() },
        }
    }

    /// The default stream of `device`.
    pub fn default_for(device: &Device) -> Result<Stream> {
        install_error_handler();
        // SAFETY: out handle starts empty and is freed by Drop.
        let mut s = Stream {
            raw: unsafe { sys::mlx_stream_new() },
        };
        check(unsafe { sys::mlx_get_default_stream(&mut s.raw, device.raw) })?;
        Ok(s)
    }

    /// A new stream on `device` that any thread may use (MLX's other streams are
    /// thread-affine: evaluating on one from another thread fails). MLX does not synchronise
    /// it: the caller must keep two threads from using it at once.
    pub fn new_thread_unsafe(device: &Device) -> Stream {
        install_error_handler();
        // SAFETY: valid device handle.
        Stream {
            raw: unsafe { sys::mlx_stream_new_thread_unsafe(device.raw) },
        }
    }

    /// Makes this stream the calling thread's default for its device, so that MLX code asking
    /// for the default stream (instead of creating the thread's own, with a CPU worker thread
    /// that outlives the calling thread) gets it.
    pub fn set_as_thread_default(&self) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::mlx_set_default_stream(self.raw) })
    }

    /// Another handle to the same stream.
    pub fn try_clone(&self) -> Result<Stream> {
        install_error_handler();
        // SAFETY: a fresh handle, then set to this one's stream; freed by Drop.
        let mut s = Stream {
            raw: unsafe { sys::mlx_stream_new() },
        };
        check(unsafe { sys::mlx_stream_set(&mut s.raw, self.raw) })?;
        Ok(s)
    }

    /// The type of the device the stream runs on.
    pub fn device_type(&self) -> Result<DeviceType> {
        // SAFETY: a fresh device handle, set from the stream and freed by Drop.
        let mut d = Device {
            raw: unsafe { sys::mlx_device_new() },
        };
        check(unsafe { sys::mlx_stream_get_device(&mut d.raw, self.raw) })?;
        d.device_type()
    }

    /// Waits until every queued operation on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::mlx_synchronize(self.raw) })
    }
}
