//! Access to the host's `OrtApi`/`OrtEpApi` and small safe helpers over them.
//!
//! The tables are obtained once, in `CreateEpFactories`, and live as long as the process (ORT
//! never frees its API tables), so they are stored as `&'static` references.

use std::ffi::{CStr, CString, c_char};
use std::ptr;
use std::sync::OnceLock;

use ort_sys::{OrtApi, OrtApiBase, OrtErrorCode, OrtStatus, OrtStatusPtr};

use crate::abi::{ORT_ABI_VERSION, OrtEpApi, StatusPtr};
use crate::error::EpError;

/// The host's API tables, as negotiated in `CreateEpFactories`.
#[derive(Clone, Copy)]
pub struct Api {
    /// The host's `OrtApi`, requested at [`ORT_ABI_VERSION`] (its layout is ort-sys's api-23).
    pub ort: &'static OrtApi,
    /// The host's `OrtEpApi` (its 1.23 prefix).
    pub ep: &'static OrtEpApi,
    /// The host ORT's minor version as it reports it (`1.N.x` gives `N`), 0 if unparsable.
    pub host_minor: u32,
    /// The host ORT's patch version (`1.N.P` gives `P`), 0 if unparsable.
    pub host_patch: u32,
}

// SAFETY: the tables are immutable function tables owned by ORT for the life of the process.
unsafe impl Send for Api {}
// SAFETY: as above; nothing in them is mutated.
unsafe impl Sync for Api {}

static API: OnceLock<Api> = OnceLock::new();

/// Parses `1.N.P` (with optional suffixes) into `(N, P)`; a missing patch reads as 0.
pub fn parse_version(version: &str) -> Option<(u32, u32)> {
    let number = |s: Option<&str>| -> Option<u32> {
        s?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let mut parts = version.trim().split('.');
    let major = number(parts.next())?;
    let minor = number(parts.next())?;
    let patch = number(parts.next()).unwrap_or(0);
    (major == 1).then_some((minor, patch))
}

/// Negotiates the API with the host: asks for `OrtApi` version [`ORT_ABI_VERSION`].
///
/// On failure returns the error and, when some older `OrtApi` exists, that table so the error
/// can still be reported as an `OrtStatus`.
///
/// # Safety
/// `base` must be the `OrtApiBase` ORT passed to `CreateEpFactories`.
pub unsafe fn negotiate(
    base: *const OrtApiBase,
) -> Result<Api, (EpError, Option<&'static OrtApi>)> {
    if let Some(api) = API.get() {
        return Ok(*api);
    }
    if base.is_null() {
        return Err((EpError::new("ORT passed a null OrtApiBase"), None));
    }
    // SAFETY: ORT's OrtApiBase is valid for the process.
    let base = unsafe { &*base };
    // SAFETY: GetVersionString returns a static NUL-terminated string.
    let version = unsafe { cstr_lossy((base.GetVersionString)()) };
    // SAFETY: GetApi accepts any version and returns null when it doesn't provide it.
    let ort = unsafe { (base.GetApi)(ORT_ABI_VERSION) };
    if ort.is_null() {
        // An older ORT: find any table to report the error with (CreateStatus is in all).
        let fallback = (1..ORT_ABI_VERSION)
            .rev()
            // SAFETY: as above.
            .map(|v| unsafe { (base.GetApi)(v) })
            .find(|p| !p.is_null())
            // SAFETY: a non-null table from ORT lives for the process.
            .map(|p| unsafe { &*p });
        return Err((
            EpError::new(format!(
                "MLXExecutionProvider needs ONNX Runtime 1.23 or newer (OrtApi version {ORT_ABI_VERSION}); \
                 this ONNX Runtime is {version}"
            )),
            fallback,
        ));
    }
    // SAFETY: non-null table from ORT, valid for the process.
    let ort: &'static OrtApi = unsafe { &*ort };
    // SAFETY: GetEpApi exists from version 22 on; we hold a version-23 table.
    let ep = unsafe { (ort.GetEpApi)() };
    if ep.is_null() {
        return Err((EpError::new("ORT returned no OrtEpApi"), Some(ort)));
    }
    let api = Api {
        ort,
        // SAFETY: non-null, static in ORT; we read only its 1.23 prefix.
        ep: unsafe { &*(ep as *const OrtEpApi) },
        host_minor: parse_version(&version).map_or(0, |v| v.0),
        host_patch: parse_version(&version).map_or(0, |v| v.1),
    };
    log::info!("ONNX Runtime {version}: using OrtApi version {ORT_ABI_VERSION}");
    Ok(*API.get_or_init(|| api))
}

/// The negotiated API.
///
/// # Panics
/// When called before `CreateEpFactories` negotiated it (ORT can't call anything else first).
pub fn api() -> Api {
    *API.get().expect("OrtApi used before CreateEpFactories")
}

/// The negotiated API, if any.
pub fn try_api() -> Option<Api> {
    API.get().copied()
}

/// Copies a C string (lossy UTF-8); null gives an empty string.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string.
pub unsafe fn cstr_lossy(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: caller guarantees NUL termination.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Makes a C string from `msg`, replacing interior NULs.
pub fn to_cstring(msg: &str) -> CString {
    CString::new(msg.replace('\0', "\\0")).unwrap_or_default()
}

/// Creates an `OrtStatus` with `code` and `msg` on `ort`.
pub fn make_status(ort: &OrtApi, code: OrtErrorCode, msg: &str) -> StatusPtr {
    let c = to_cstring(msg);
    // SAFETY: CreateStatus copies the message.
    unsafe { (ort.CreateStatus)(code, c.as_ptr()) }.0
}

impl Api {
    /// True on ORT 1.23.0, whose memcpy transformer treats every plugin EP as a device EP and
    /// then finds no `MemcpyFromHost` kernel for it (fixed in 1.23.1, ORT pull request
    /// 26088): a session there fails unless the EP takes whole graphs.
    pub fn needs_whole_graphs(&self) -> bool {
        self.host_minor == 23 && self.host_patch == 0
    }

    /// Turns a status returned by ORT into a `Result`, releasing the status.
    pub fn check(&self, status: OrtStatusPtr, what: &str) -> Result<(), EpError> {
        let st: *mut OrtStatus = status.0;
        if st.is_null() {
            return Ok(());
        }
        // SAFETY: a non-null status from ORT; message valid until released.
        let msg = unsafe { cstr_lossy((self.ort.GetErrorMessage)(st)) };
        // SAFETY: we own the status.
        unsafe { (self.ort.ReleaseStatus)(st) };
        Err(EpError::new(format!("{what}: {msg}")))
    }

    /// Calls an ORT function that reports through its status and writes one value through its
    /// last argument (handed `init` to overwrite): the value, or the status as an error naming
    /// `what`.
    pub fn out<T>(
        &self,
        what: &str,
        init: T,
        call: impl FnOnce(&mut T) -> OrtStatusPtr,
    ) -> Result<T, EpError> {
        let mut value = init;
        self.check(call(&mut value), what)?;
        Ok(value)
    }

    /// Releases a status without looking at it.
    pub fn discard(&self, status: OrtStatusPtr) {
        if !status.0.is_null() {
            // SAFETY: we own the status.
            unsafe { (self.ort.ReleaseStatus)(status.0) };
        }
    }

    /// The `OrtApi` function at member index `index`, when the host's table has it.
    ///
    /// Members after ort-sys's api-23 layout are reached this way: `OrtApi` is append-only,
    /// and a host that answers `GetApi(v)` has every member up to version `v`.
    pub fn member_after_v23(&self, index_after_v23: usize, since_minor: u32) -> *const () {
        if self.host_minor < since_minor {
            return ptr::null();
        }
        let base = self.ort as *const OrtApi as *const *const ();
        let index = size_of::<OrtApi>() / size_of::<*const ()>() + index_after_v23;
        // SAFETY: the host is at least 1.`since_minor`, so its table extends this far.
        unsafe { *base.add(index) }
    }

    /// The `OrtEpApi` function at member index `index` (see [`crate::abi::ep_api_index`]), when
    /// the host is at least 1.`since_minor` (`OrtEpApi` is append-only too); else null.
    pub fn ep_member(&self, index: usize, since_minor: u32) -> *const () {
        if self.host_minor < since_minor {
            return ptr::null();
        }
        let base = self.ep as *const OrtEpApi as *const *const ();
        // SAFETY: a host of 1.`since_minor` or newer has every member of that version.
        unsafe { *base.add(index) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("1.31.1"), Some((31, 1)));
        assert_eq!(parse_version("1.23.0"), Some((23, 0)));
        assert_eq!(parse_version("1.24"), Some((24, 0)));
        assert_eq!(parse_version("1.25.0-dev"), Some((25, 0)));
        assert_eq!(parse_version("2.0.0"), None);
        assert_eq!(parse_version("junk"), None);
    }
}
