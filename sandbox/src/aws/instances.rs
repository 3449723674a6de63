//! What the emulators know of EC2 instance types: the GPUs each comes with, its vCPUs
//! and memory. EKS sizes its nodes with it, EC2 answers DescribeInstanceTypes from it.

/// The GPUs an EC2 instance type comes with.
pub(crate) fn instance_gpus(instance_type: &str) -> Option<i64> {
    let (family, size) = instance_type.split_once('.')?;
    let gpus = match (family, size) {
        ("p3", "2xlarge") => 1,
        ("p3", "8xlarge") => 4,
        ("p3", "16xlarge") => 8,
        ("p3dn", "24xlarge") | ("p4d", "24xlarge") | ("p4de", "24xlarge") => 8,
        ("p5", "48xlarge") | ("p5e", "48xlarge") | ("p5en", "48xlarge") => 8,
        ("g4dn", "12xlarge") => 4,
        ("g4dn", "metal") => 8,
        ("g4dn", _) => 1,
        ("g5", "12xlarge" | "24xlarge") => 4,
        ("g5", "48xlarge") => 8,
        ("g5", _) => 1,
        ("g6" | "g6e", "12xlarge" | "24xlarge") => 4,
        ("g6" | "g6e", "48xlarge") => 8,
        ("g6" | "g6e", _) => 1,
        _ => return None,
    };
    Some(gpus)
}

/// vCPUs and memory (MiB) of an EC2 instance type; unknown types count as 2 vCPUs and
/// 8 GiB.
pub(crate) fn instance_shape(instance_type: &str) -> (i64, i64) {
    const GIB: i64 = 1024;
    let explicit = match instance_type {
        "t3.micro" => Some((2, 1)),
        "t3.small" => Some((2, 2)),
        "t3.medium" => Some((2, 4)),
        "t3.large" => Some((2, 8)),
        "t3.xlarge" => Some((4, 16)),
        "t3.2xlarge" => Some((8, 32)),
        "p3.2xlarge" => Some((8, 61)),
        "p3.8xlarge" => Some((32, 244)),
        "p3.16xlarge" => Some((64, 488)),
        "p3dn.24xlarge" => Some((96, 768)),
        "p4d.24xlarge" | "p4de.24xlarge" => Some((96, 1152)),
        "p5.48xlarge" | "p5e.48xlarge" | "p5en.48xlarge" => Some((192, 2048)),
        "g4dn.metal" => Some((96, 384)),
        "g5.48xlarge" | "g6.48xlarge" => Some((192, 768)),
        _ => None,
    };
    if let Some((cpu, gib)) = explicit {
        return (cpu, gib * GIB);
    }
    let Some((family, size)) = instance_type.split_once('.') else {
        return (2, 8 * GIB);
    };
    let cpu = match size {
        "large" => Some(2),
        "xlarge" => Some(4),
        s => s
            .strip_suffix("xlarge")
            .and_then(|n| n.parse::<i64>().ok())
            .map(|n| 4 * n),
    };
    // GiB per vCPU by family: general purpose 4, compute 2, memory 8; the GPU families
    // are general purpose around their GPUs.
    let per_cpu = match family.chars().next() {
        Some('m' | 'g') => Some(4),
        Some('c') => Some(2),
        Some('r') => Some(8),
        _ => None,
    };
    match (cpu, per_cpu) {
        (Some(cpu), Some(per)) => (cpu, cpu * per * GIB),
        _ => (2, 8 * GIB),
    }
}
