//! What machine a benchmark ran on, read from /proc.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub memory_gb: f64,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or_else(|| "unknown".to_string(), |(_, m)| m.trim().to_string());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".to_string(), |s| s.trim().to_string());
        let mem_kb: f64 = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0.0);
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            kernel,
            memory_gb: (mem_kb / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        }
    }
}
