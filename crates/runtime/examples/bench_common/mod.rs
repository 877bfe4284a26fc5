//! What the runtime's bench examples share (`overhead_bench`, `small_bench`): the timer and the
//! per-phase medians of an executable's runs.

use std::time::Instant;

use runtime::{Executable, InputTensor};

/// Medians of repeated calls within a time budget.
pub struct Timer {
    /// Seconds each measurement may take (at least 5 calls are made whatever it is).
    pub budget_s: f64,
}

impl Timer {
    /// Median seconds per call of `f` after `warmup` calls, over at least 5 and at most 1000
    /// calls or the time budget.
    pub fn median(
        &self,
        warmup: usize,
        f: &mut dyn FnMut() -> Result<(), String>,
    ) -> Result<f64, String> {
        for _ in 0..warmup {
            f()?;
        }
        let mut times = Vec::new();
        let start = Instant::now();
        while times.len() < 5
            || (times.len() < 1000 && start.elapsed().as_secs_f64() < self.budget_s)
        {
            let t = Instant::now();
            f()?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.total_cmp(b));
        Ok(times[times.len() / 2])
    }
}

/// Where the EP's run time goes: the median of each phase over a few more runs.
pub fn median_phases(
    exe: &Executable,
    inputs: &[InputTensor<'_>],
) -> Result<Vec<(&'static str, u32)>, String> {
    let mut samples: Vec<[(&'static str, u32); 5]> = Vec::new();
    for _ in 0..9 {
        exe.run(inputs).map_err(|e| e.to_string())?;
        if let Some(last) = exe.run_stats().last {
            samples.push(last.phases.named());
        }
    }
    let Some(first) = samples.first() else {
        return Ok(Vec::new());
    };
    Ok((0..first.len())
        .map(|k| {
            let mut v: Vec<u32> = samples.iter().map(|s| s[k].1).collect();
            v.sort_unstable();
            (first[k].0, v[v.len() / 2])
        })
        .collect())
}

/// Phase medians as the body of a JSON object: `"bind": 12, "eval": 340`.
pub fn phases_json(phases: &[(&'static str, u32)]) -> String {
    phases
        .iter()
        .map(|(name, us)| format!("\"{name}\": {us}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes a bench's JSON report to `out` (making its folder) and says where.
pub fn write_report(out: &std::path::Path, json: &str) -> Result<(), String> {
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    std::fs::write(out, json).map_err(|e| format!("{}: {e}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}
