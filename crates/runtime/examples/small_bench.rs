//! The plan side of `cargo xtask bench small`: each small model's plan run through the runtime
//! directly, without ONNX Runtime.
//!
//! `tests/python/small_bench.py prepare` writes every model of `tests/python/small_graphs.py`
//! as `<dir>/<name>/model.onnx`, after ONNX Runtime's basic graph rewrites (the ones ORT applies
//! before it hands a graph to an execution provider), with its inputs and ORT's CPU EP outputs
//! as `test_data_set_0/{input,output}_<i>.pb`. This reads them with `onnx_ir::proto`, claims
//! and partitions them as the EP does (every node must land in one cluster), plans the cluster
//! with `plan::build_plan` and runs it with `runtime::Executable` under the EP's default options
//! for the device (the compile mode the EP would pick). Per run, as the EP does with host inputs:
//! inputs uploaded from host bytes, outputs evaluated and read back. Times are medians after a
//! warm-up; the outputs are compared with ORT's CPU EP (`max |plan - cpu|`).
//!
//! Arguments: `--dir <dir>` (required), `--device cpu|gpu`, `--out <json>`,
//! `--budget-ms <per model>`, `--only <name,...>`, `--explain` (print each plan and what keeps
//! it from the shapeless compiled slot). `tests/python/small_bench.py measure` then adds the ORT
//! timings to the JSON.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use onnx_ir::{DataType, Graph, TensorData};
use runtime::{DeviceKind, Executable, InputTensor, RuntimeOptions};

mod bench_common;
use bench_common::{Timer, median_phases, phases_json, write_report};

/// One model as `small_bench.py prepare` wrote it.
struct Model {
    name: String,
    graph: Graph,
    /// Inputs by name, in the model's input order.
    inputs: Vec<(String, TensorData)>,
    /// ORT's CPU EP outputs by name.
    expected: Vec<(String, TensorData)>,
}

fn read_pb(path: &Path) -> Result<(String, TensorData), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    onnx_ir::proto::read_tensor(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// The `<prefix>_<i>.pb` tensors of `dir`, in index order.
fn read_set(dir: &Path, prefix: &str) -> Result<Vec<(String, TensorData)>, String> {
    let mut out = Vec::new();
    for i in 0.. {
        let path = dir.join(format!("{prefix}_{i}.pb"));
        if !path.is_file() {
            break;
        }
        out.push(read_pb(&path)?);
    }
    Ok(out)
}

fn load(dir: &Path, name: &str) -> Result<Model, String> {
    let folder = dir.join(name);
    let path = folder.join("model.onnx");
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let graph =
        onnx_ir::proto::read_model(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let data = folder.join("test_data_set_0");
    Ok(Model {
        name: name.to_string(),
        graph,
        inputs: read_set(&data, "input")?,
        expected: read_set(&data, "output")?,
    })
}

/// The model's one fused cluster as the EP would compile it.
fn cluster(model: &Model) -> Result<Graph, String> {
    let registry = plan::Registry::default();
    let part = plan::partition_plannable(&model.graph, &registry);
    if let Some(d) = part.declines.first() {
        return Err(format!(
            "{}: {} node(s) stay on ORT's CPU EP, e.g. {} ({}): {}",
            model.name,
            part.declines.len(),
            d.node,
            d.op_type,
            d.reason
        ));
    }
    match part.clusters.as_slice() {
        [one] => Ok(plan::cluster_graph(&model.graph, one)),
        other => Err(format!("{}: {} clusters, not one", model.name, other.len())),
    }
}

/// The largest absolute difference between `a` and `b` (both float32), or infinity when
/// their shapes differ.
fn max_abs_diff(dims: &[i64], data: &[u8], expected: &TensorData) -> f64 {
    if dims != expected.dims.as_slice() {
        return f64::INFINITY;
    }
    let actual = TensorData::new(expected.dtype, dims.to_vec(), data.to_vec())
        .ok()
        .and_then(|t| t.to_f64_vec());
    match (actual, expected.to_f64_vec()) {
        (Some(a), Some(e)) if a.len() == e.len() => a
            .iter()
            .zip(&e)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max),
        _ => f64::INFINITY,
    }
}

struct Measured {
    name: String,
    nodes: usize,
    steps: usize,
    class: String,
    plan_s: f64,
    path: &'static str,
    syncs_per_run: f64,
    reads_per_run: f64,
    compiles: u64,
    max_abs_diff: f64,
    phases: Vec<(&'static str, u32)>,
}

fn measure(
    model: &Model,
    device: DeviceKind,
    timer: &Timer,
    explain: bool,
) -> Result<Measured, String> {
    let graph = cluster(model)?;
    let plan = plan::build_plan(&graph, &plan::Registry::default())
        .map_err(|e| format!("{}: plan: {e}", model.name))?;
    if explain {
        println!("{}: compile class {:?}", model.name, plan.compile_class());
        for b in plan.compile_blockers() {
            println!("  {b}");
        }
        println!("{plan}");
    }
    let (steps, class) = (plan.steps.len(), format!("{:?}", plan.compile_class()));
    let inputs: Vec<InputTensor<'_>> = plan
        .inputs
        .iter()
        .map(|pi| {
            let (_, t) = model
                .inputs
                .iter()
                .find(|(n, _)| *n == pi.name)
                .ok_or_else(|| format!("{}: no input data for '{}'", model.name, pi.name))?;
            Ok(InputTensor {
                dtype: t.dtype,
                dims: &t.dims,
                data: &t.bytes,
            })
        })
        .collect::<Result<_, String>>()?;
    let output_names = plan.output_names.clone();
    let exe = Executable::new(
        plan,
        &RuntimeOptions {
            device,
            ..RuntimeOptions::default()
        },
    )
    .map_err(|e| format!("{}: {e}", model.name))?;
    let plan_s = timer.median(3, &mut || {
        exe.run(&inputs).map(drop).map_err(|e| e.to_string())
    })?;
    let stats = exe.run_stats();
    let phases = median_phases(&exe, &inputs)?;
    let outputs = exe.run(&inputs).map_err(|e| e.to_string())?;
    let mut diff = 0.0f64;
    for (name, out) in output_names.iter().zip(&outputs) {
        let Some((_, e)) = model.expected.iter().find(|(n, _)| n == name) else {
            return Err(format!("{}: no expected data for '{name}'", model.name));
        };
        if e.dtype != DataType::Float {
            continue;
        }
        diff = diff.max(max_abs_diff(&out.dims, out.data(), e));
    }
    Ok(Measured {
        name: model.name.clone(),
        nodes: model.graph.nodes.len(),
        steps,
        class,
        plan_s,
        path: stats.last.map_or("none", |l| l.path.name()),
        syncs_per_run: stats.syncs_per_run(),
        reads_per_run: stats.reads_per_run(),
        compiles: exe.cache_stats().compiles,
        max_abs_diff: diff,
        phases,
    })
}

fn main() {
    if let Err(e) = run() {
        eprintln!("small bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let mut device = DeviceKind::Cpu;
    let mut dir: Option<PathBuf> = None;
    let mut out = PathBuf::from("target/bench/small.json");
    let mut budget_ms = 2000.0;
    let mut only: Option<Vec<String>> = None;
    let mut explain = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--device" => {
                device = match value()?.as_str() {
                    "cpu" => DeviceKind::Cpu,
                    "gpu" => DeviceKind::Gpu,
                    other => return Err(format!("--device cpu|gpu, not {other}")),
                }
            }
            "--dir" => dir = Some(value()?.into()),
            "--out" => out = value()?.into(),
            "--budget-ms" => {
                budget_ms = value()?.parse().map_err(|e| format!("--budget-ms: {e}"))?
            }
            "--only" => only = Some(value()?.split(',').map(str::to_string).collect()),
            "--explain" => explain = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let dir = dir.ok_or("--dir <folder written by small_bench.py prepare> is required")?;
    runtime::init().map_err(|e| e.to_string())?;
    if device == DeviceKind::Gpu && !runtime::gpu_available() {
        return Err("--device gpu: the linked MLX has no GPU".into());
    }
    let timer = Timer {
        budget_s: budget_ms / 1000.0,
    };
    let order = std::fs::read_to_string(dir.join("models.txt"))
        .map_err(|e| format!("{}: {e}", dir.join("models.txt").display()))?;
    println!(
        "{:<18}{:>6}{:>7}{:>10}   path, host syncs/reads per run, compiles; max |plan - cpu|",
        "model", "nodes", "steps", "plan_ms"
    );
    let mut results = Vec::new();
    for name in order.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if only.as_ref().is_some_and(|o| !o.iter().any(|n| n == name)) {
            continue;
        }
        let m = measure(&load(&dir, name)?, device, &timer, explain)?;
        println!(
            "{:<18}{:>6}{:>7}{:>10.3}   {} ({}), {:.1}/{:.1}, {}; {:.1e}",
            m.name,
            m.nodes,
            m.steps,
            m.plan_s * 1e3,
            m.path,
            m.class,
            m.syncs_per_run,
            m.reads_per_run,
            m.compiles,
            m.max_abs_diff
        );
        results.push(m);
    }
    let mut json = String::from("{\n");
    let device_name = if device == DeviceKind::Gpu {
        "gpu"
    } else {
        "cpu"
    };
    let _ = writeln!(json, "  \"device\": \"{device_name}\",");
    let _ = writeln!(json, "  \"mlx\": \"{}\",", mlx::version());
    json.push_str("  \"models\": [\n");
    for (i, m) in results.iter().enumerate() {
        let _ = writeln!(
            json,
            "    {{\"name\": \"{}\", \"nodes\": {}, \"steps\": {}, \"compile_class\": \"{}\", \"plan_ms\": {:.4}, \
             \"plan_path\": \"{}\", \"host_syncs_per_run\": {:.3}, \"host_reads_per_run\": {:.3}, \"compiles\": {}, \
             \"plan_max_abs_diff\": {:e}, \"phases_us\": {{{}}}}}{}",
            m.name,
            m.nodes,
            m.steps,
            m.class,
            m.plan_s * 1e3,
            m.path,
            m.syncs_per_run,
            m.reads_per_run,
            m.compiles,
            m.max_abs_diff,
            phases_json(&m.phases),
            if i + 1 < results.len() { "," } else { "" }
        );
    }
    json.push_str("  ]\n}\n");
    write_report(&out, &json)?;
    Ok(())
}
