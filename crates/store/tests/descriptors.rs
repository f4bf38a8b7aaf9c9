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
    let readers: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                store
                    .read(PKey(0), |_tx| {
                        std::thread::sleep(Duration::from_millis(100));
                        Ok::<_, Error>(())
                    })
                    .wait()
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap().expect("every read is served");
    }
    let free = soft.saturating_sub(open_descriptors());
    assert!(
        free >= margin,
        "{free} descriptors free of {soft}, fewer than the margin {margin}"
    );
    // And with descriptors to spare again, reads still run.
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
    let jobs: Vec<_> = (0..6)
        .map(|i| {
            let tenant = store.for_tenant_code(["r", "q", "s"][i % 3]);
            std::thread::spawn(move || {
                tenant.call(PKey(1), |_tx| {
                    std::thread::sleep(Duration::from_millis(100));
                    Ok::<_, Error>(())
                })
            })
        })
        .collect();
    for j in jobs {
        j.join().unwrap().expect("every job runs");
    }
    let free = soft.saturating_sub(open_descriptors());
    assert!(
        free >= margin,
        "{free} descriptors free of {soft} after tenant code, fewer than the margin {margin}"
    );
}
