//! `tabos-www-task`: a site's procs as a program of their own (`wwd SITE
//! LISTEN`, `worker SITE`), for sites started by something other than the
//! `tabos` binary (which runs them as `tabos www-task …`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(tabos_www::main(&args));
}
