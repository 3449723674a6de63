//! Compute Engine's machine types as the emulators need them (the vCPUs and memory of
//! each, the GPUs some come with) and what a zone's name looks like. Below GKE
//! (`container.rs`), its nodes (`kube.rs`) and the quotas (`compute.rs`), which all read
//! them.

/// vCPUs and memory (MiB) of a machine type the sandbox's Compute Engine has (what
/// `machineTypes.get` serves and node pools consume); `None` for others.
pub(crate) fn known_machine_shape(machine_type: &str) -> Option<(i64, i64)> {
    const GIB: f64 = 1024.0;
    let parts: Vec<&str> = machine_type.split('-').collect();
    let n = |s: &str| s.trim_end_matches(['g', 't']).parse::<i64>().ok();
    let shape = match parts.as_slice() {
        ["e2", "micro"] => Some((2, 1.0)),
        ["e2", "small"] => Some((2, 2.0)),
        ["e2", "medium"] => Some((2, 4.0)),
        ["custom", cpu, mem] | [_, "custom", cpu, mem] => {
            n(cpu).zip(n(mem)).map(|(c, m)| (c, m as f64 / GIB))
        }
        ["a2", "highgpu", g] => n(g).map(|g| (12 * g, 85.0 * g as f64)),
        ["a2", "ultragpu", g] => n(g).map(|g| (12 * g, 170.0 * g as f64)),
        ["a2", "megagpu", _] => Some((96, 1360.0)),
        ["a3", _, _] => Some((208, 1872.0)),
        ["ct4p", _, t] | ["ct5p", _, t] => n(t).map(|t| (52 * t, 112.0 * t as f64)),
        ["ct5lp", _, "1t"] | ["ct5l", _, "1t"] => Some((24, 48.0)),
        ["ct5lp", _, t] | ["ct5l", _, t] => n(t).map(|t| (28 * t, 48.0 * t as f64)),
        ["ct6e", _, "1t"] => Some((44, 176.0)),
        ["ct6e", _, t] => n(t).map(|t| (180, 180.0 * t as f64)),
        ["n1", "standard", c] => n(c).map(|c| (c, 3.75 * c as f64)),
        ["n1", "highmem", c] => n(c).map(|c| (c, 6.5 * c as f64)),
        ["n1", "highcpu", c] => n(c).map(|c| (c, 0.9 * c as f64)),
        [_, "standard", c] => n(c).map(|c| (c, 4.0 * c as f64)),
        [_, "highmem", c] => n(c).map(|c| (c, 8.0 * c as f64)),
        [_, "highcpu", c] => n(c).map(|c| (c, c as f64)),
        _ => None,
    };
    shape.map(|(cpu, gib)| (cpu, (gib * GIB).round() as i64))
}

/// The GPUs some machine types come with when no accelerator is configured.
pub(crate) fn bundled_gpus(machine_type: &str) -> Option<(&'static str, i64)> {
    let parts: Vec<&str> = machine_type.split('-').collect();
    let count = |s: &str| s.trim_end_matches('g').parse::<i64>().ok();
    match parts.as_slice() {
        ["a2", "highgpu", g] => count(g).map(|c| ("nvidia-tesla-a100", c)),
        ["a2", "megagpu", g] => count(g).map(|c| ("nvidia-tesla-a100", c)),
        ["a2", "ultragpu", g] => count(g).map(|c| ("nvidia-a100-80gb", c)),
        ["a3", "megagpu", g] => count(g).map(|c| ("nvidia-h100-mega-80gb", c)),
        ["a3", _, g] => count(g).map(|c| ("nvidia-h100-80gb", c)),
        ["g2", "standard", cpu] => cpu.parse::<i64>().ok().map(|cpu| {
            let gpus = match cpu {
                24 => 2,
                48 => 4,
                96 => 8,
                _ => 1,
            };
            ("nvidia-l4", gpus)
        }),
        _ => None,
    }
}

/// Whether `location` is a zone (`us-central1-a`) rather than a region (`us-central1`).
pub(crate) fn is_zone(location: &str) -> bool {
    let parts: Vec<&str> = location.split('-').collect();
    parts.len() == 3 && parts[2].len() == 1 && parts[2].bytes().all(|b| b.is_ascii_lowercase())
}
