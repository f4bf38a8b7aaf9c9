//! `tabos-kv-task`: the key-value service's procs as a program of their own
//! (`kvd SVC GROUP`), for services started by something other than the
//! `tabos` binary (which runs them as `tabos kv-task …`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(tabos_kv::main(&args));
}
