//! The SQLite backend's read pools and tenant connections under a low
//! descriptor limit: they stop growing while the process still has
//! descriptors to spare, so a server
//! over the store can still accept connections (see
//! `tabos_store::descriptors`). Its own test binary: it lowers the whole
//! process's `RLIMIT_NOFILE`.

use std::time::Duration;

use tabos_store::testing::TempDir;
use tabos_store::{descriptors, Config, Error, PKey, Store};

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn set_soft_limit(soft: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = soft as libc::rlim_t;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// Runs `job(i)` for `i` in `0..n`, each on a thread of its own, all at
/// once; each must succeed.
fn at_once(n: usize, job: impl Fn(usize) -> Result<(), Error> + Send + Sync + 'static) {
    let job = std::sync::Arc::new(job);
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let job = job.clone();
            std::thread::spawn(move || job(i))
        })
        .collect();
    for t in threads {
        t.join().unwrap().expect("every call is served");
    }
}

/// Each call holds its connection this long, so that they overlap.
const HOLD: Duration = Duration::from_millis(100);

#[test]
fn read_pools_leave_descriptors_free_under_a_low_limit() {
    let dir = TempDir::new("descriptors");
    let config = Config::sqlite(dir.path())
        .with_partitions(8)
        .with_connections(8);
    let store = Store::open(&config, &[]).unwrap();
    // Room for the free margin and four readers of one partition (two
    // descriptors each): a pool that grew to its eight would leave fewer
    // than the margin free.
    let margin = descriptors::FREE_MIN;
    let soft = open_descriptors() + margin + 8;
    assert_eq!(descriptors::free_min(soft), margin, "the limit is low");
    set_soft_limit(soft);
    // Sixteen reads at once on one partition, each holding its connection
    // a while: without the bound the pool opens all eight.
    let readers = store.clone();
    at_once(16, move |_| {
        readers
            .read(PKey(0), |_tx| {
                std::thread::sleep(HOLD);
                Ok::<_, Error>(())
            })
            .wait()
    });
    let free = soft.saturating_sub(open_descriptors());
    assert!(
        free >= margin,
        "{free} descriptors free of {soft}, fewer than the margin {margin}"
    );
    // A read after them runs on the connections the pool kept.
    store
        .read(PKey(0), |_tx| Ok::<_, Error>(()))
        .wait()
        .unwrap();

    // Tenant code's connections (up to three per partition, two
    // descriptors each): room for the margin and one more after the first.
    // (One test, not two: both set the process's limit.)
    let tenant = store.for_tenant_code("r");
    tenant.call(PKey(1), |_tx| Ok::<_, Error>(())).unwrap();
    let soft = open_descriptors() + margin + 3;
    set_soft_limit(soft);
    // Three realms: a partition's last slot is only for a realm running
    // none, so fewer could not fill its three.
    let tenants = store.clone();
    at_once(6, move |i| {
        tenants
            .for_tenant_code(["r", "q", "s"][i % 3])
            .call(PKey(1), |_tx| {
                std::thread::sleep(HOLD);
                Ok::<_, Error>(())
            })
    });
    let free = soft.saturating_sub(open_descriptors());
    assert!(
        free >= margin,
        "{free} descriptors free of {soft} after tenant code, fewer than the margin {margin}"
    );
}
