//! IPC through the message table, on SQLite and on PostgreSQL.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tabos_kernel::ids::Pid;
use tabos_kernel::ipc::{self, Address, MailboxOptions, Outgoing, Take};
use tabos_kernel::procs::{self, Descriptor};
use tabos_kernel::sched::Scheduler;
use tabos_kernel::{realms, Error};
use tabos_store::Store;

use crate::common;
use common::{rt, Backend, Fixture};

both!(
    send_receive_peek_and_order,
    exactly_once_with_concurrent_receivers,
    messages_survive_a_restart,
    idempotent_send,
    bad_sends_change_nothing,
    unknown_and_proc_mailboxes,
    waiting_receivers_are_woken,
    delivered_messages_can_be_logged,
    sends_hand_over_to_waiting_receivers,
    hand_over_loses_nothing_when_receivers_give_up,
    procs_sends_and_receipts_are_their_provenance,
    a_procs_messages_through_named_mailboxes_are_its_provenance,
);

const REALM: &str = "r";
const OPTS: MailboxOptions = MailboxOptions {
    bytes_max: ipc::MAILBOX_BYTES_DEFAULT,
    log_delivered: false,
};

fn named(s: &str) -> Address {
    Address::parse(s).unwrap()
}

fn msg(to: &str, payload: &[u8]) -> Outgoing {
    Outgoing {
        to: named(to),
        payload: payload.to_vec(),
        message_id: None,
    }
}

async fn send1(store: &Store, from: &str, to: &str, payload: &[u8]) -> tabos_kernel::Result<i64> {
    let sent = ipc::send(
        store,
        &common::as_user(REALM, "root"),
        Some(named(from)),
        vec![msg(to, payload)],
        OPTS,
    )
    .await?;
    Ok(sent[0].seq)
}

async fn recv_now(store: &Store, to: &str, max: usize) -> tabos_kernel::Result<Vec<ipc::Message>> {
    Ok(ipc::recv(
        store,
        &common::as_user(REALM, "root"),
        &named(to),
        Take::messages(max),
        Duration::ZERO,
        std::future::pending(),
    )
    .await?
    .messages)
}

/// Every message left in a mailbox (so counters can be checked against rows).
fn queued_rows(store: &Store, to: &str) -> i64 {
    store
        .query(
            "SELECT count(*) FROM message WHERE realm = $1 AND receiver = $2",
            &[REALM.into(), to.into()],
        )
        .unwrap()
        .rows[0]
        .get(0)
        .unwrap()
}

fn send_receive_peek_and_order(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "inbox", OPTS)
            .await
            .unwrap();
        assert!(matches!(
            ipc::create_mailbox(s, &common::as_user(REALM, "root"), "inbox", OPTS).await,
            Err(Error::AlreadyExists(_))
        ));
        for i in 0..5u8 {
            assert_eq!(
                send1(s, "a", "inbox", &[i]).await.unwrap(),
                i64::from(i) + 1
            );
        }
        let peeked = ipc::peek(
            s,
            &common::as_user(REALM, "root"),
            &named("inbox"),
            Take::messages(2),
        )
        .await
        .unwrap();
        assert_eq!(peeked.messages.len(), 2);
        assert_eq!(queued_rows(s, "inbox"), 5, "peek takes nothing");

        let got = recv_now(s, "inbox", 3).await.unwrap();
        let payloads: Vec<u8> = got.iter().map(|m| m.payload[0]).collect();
        assert_eq!(payloads, [0, 1, 2]);
        assert!(got.iter().all(|m| m.sender == "a"));
        assert_eq!(recv_now(s, "inbox", 0).await.unwrap().len(), 2);
        assert!(recv_now(s, "inbox", 0).await.unwrap().is_empty());
        let info = ipc::mailbox(s, &common::as_user(REALM, "root"), &named("inbox"))
            .await
            .unwrap();
        assert_eq!((info.queued, info.queued_bytes, info.next_seq), (0, 0, 6));

        // A byte budget smaller than the next message takes nothing and
        // says how much is needed.
        send1(s, "a", "inbox", &[7; 100]).await.unwrap();
        let small = ipc::recv(
            s,
            &common::as_user(REALM, "root"),
            &named("inbox"),
            Take {
                max: 1,
                bytes_max: 10,
            },
            Duration::from_secs(1),
            std::future::pending(),
        )
        .await
        .unwrap();
        assert_eq!((small.messages.len(), small.next_bytes), (0, Some(100)));
        assert_eq!(recv_now(s, "inbox", 1).await.unwrap()[0].payload.len(), 100);

        // Several concurrent senders: each one's messages arrive in its order.
        let senders = 4;
        let per = 50u32;
        let mut tasks = Vec::new();
        for w in 0..senders {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..per {
                    send1(&s, &format!("s{w}"), "inbox", &i.to_le_bytes())
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let mut next: HashMap<String, u32> = HashMap::new();
        let mut total = 0;
        loop {
            let got = recv_now(s, "inbox", 7).await.unwrap();
            if got.is_empty() {
                break;
            }
            for m in got {
                let i = u32::from_le_bytes(m.payload[..4].try_into().unwrap());
                let want = next.entry(m.sender.clone()).or_insert(0);
                assert_eq!(i, *want, "out of order from {}", m.sender);
                *want += 1;
                total += 1;
            }
        }
        assert_eq!(total, senders * per);
    });
}

fn exactly_once_with_concurrent_receivers(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    // The issue's figure; TABOS_STRESS_MESSAGES lowers it on slow machines.
    let total: u32 = std::env::var("TABOS_STRESS_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let senders = 4u32;
    let receivers = 4;
    let batch = 100u32;
    rt().block_on(async {
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "work", OPTS)
            .await
            .unwrap();
        let mut send_tasks = Vec::new();
        for w in 0..senders {
            let s = s.clone();
            send_tasks.push(tokio::spawn(async move {
                let mine: Vec<u32> = (0..total).filter(|i| i % senders == w).collect();
                for chunk in mine.chunks(batch as usize) {
                    let msgs = chunk
                        .iter()
                        .map(|i| msg("work", &i.to_le_bytes()))
                        .collect();
                    ipc::send(
                        &s,
                        &common::as_user(REALM, "root"),
                        Some(named(&format!("s{w}"))),
                        msgs,
                        OPTS,
                    )
                    .await
                    .unwrap();
                }
            }));
        }
        let seen = Arc::new(std::sync::Mutex::new(vec![0u8; total as usize]));
        let count = Arc::new(std::sync::atomic::AtomicU32::new(0));
        // Set by the receiver that takes the last message; stops the others.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stop_tx = Arc::new(stop_tx);
        let mut recv_tasks = Vec::new();
        for _ in 0..receivers {
            let (s, seen, count) = (s.clone(), seen.clone(), count.clone());
            let (stop_tx, stop_rx) = (stop_tx.clone(), stop_rx.clone());
            recv_tasks.push(tokio::spawn(async move {
                let mut last: HashMap<String, u32> = HashMap::new();
                let mut n = 0u64;
                loop {
                    let mut stop_rx = stop_rx.clone();
                    let stop = async move {
                        let _ = stop_rx.wait_for(|v| *v).await;
                    };
                    let got = ipc::recv(
                        &s,
                        &common::as_user(REALM, "root"),
                        &named("work"),
                        Take::default(),
                        Duration::from_secs(60),
                        stop,
                    )
                    .await
                    .unwrap();
                    if got.messages.is_empty() {
                        return n;
                    }
                    for m in got.messages {
                        let i = u32::from_le_bytes(m.payload[..4].try_into().unwrap());
                        // Each receiver sees any one sender's messages in order.
                        if let Some(prev) = last.insert(m.sender.clone(), i) {
                            assert!(prev < i, "{} sent {prev} before {i}", m.sender);
                        }
                        seen.lock().unwrap()[i as usize] += 1;
                        n += 1;
                        if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == total {
                            stop_tx.send_replace(true);
                        }
                    }
                }
            }));
        }
        for t in send_tasks {
            t.await.unwrap();
        }
        let mut received = 0;
        for t in recv_tasks {
            received += t.await.unwrap();
        }
        assert_eq!(received, u64::from(total));
        let wrong: Vec<usize> = {
            let seen = seen.lock().unwrap();
            (0..seen.len()).filter(|&i| seen[i] != 1).collect()
        };
        assert!(
            wrong.is_empty(),
            "messages not received exactly once: {:?}",
            &wrong[..wrong.len().min(10)]
        );
        assert_eq!(queued_rows(s, "work"), 0);
        let info = ipc::mailbox(s, &common::as_user(REALM, "root"), &named("work"))
            .await
            .unwrap();
        assert_eq!((info.queued, info.queued_bytes), (0, 0));
    });
}

fn messages_survive_a_restart(b: Backend) {
    let Some(f) = b.open() else { return };
    rt().block_on(async {
        ipc::create_mailbox(&f.store, &common::as_user(REALM, "root"), "keep", OPTS)
            .await
            .unwrap();
        for i in 0..3u8 {
            send1(&f.store, "a", "keep", &[i]).await.unwrap();
        }
    });
    let Fixture {
        store,
        config,
        _dir,
    } = f;
    drop(store);
    let store = tabos_kernel::open(&config).unwrap();
    rt().block_on(async {
        let got = recv_now(&store, "keep", 0).await.unwrap();
        assert_eq!(
            got.iter().map(|m| m.payload[0]).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        // Sequence numbers go on from where they were.
        assert_eq!(send1(&store, "a", "keep", b"x").await.unwrap(), 4);
    });
}

fn idempotent_send(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "idem", OPTS)
            .await
            .unwrap();
        let with_id = |id: &str, p: &[u8]| Outgoing {
            to: named("idem"),
            payload: p.to_vec(),
            message_id: Some(id.to_string()),
        };
        let a = ipc::send(
            s,
            &common::as_user(REALM, "root"),
            Some(named("a")),
            vec![with_id("m1", b"one")],
            OPTS,
        )
        .await
        .unwrap();
        let again = ipc::send(
            s,
            &common::as_user(REALM, "root"),
            Some(named("a")),
            vec![with_id("m1", b"one")],
            OPTS,
        )
        .await
        .unwrap();
        assert!(!a[0].duplicate);
        assert!(again[0].duplicate);
        assert_eq!(a[0].seq, again[0].seq);
        // Same id from another sender is another message; so is a new id.
        let other = ipc::send(
            s,
            &common::as_user(REALM, "root"),
            Some(named("b")),
            vec![with_id("m1", b"two")],
            OPTS,
        )
        .await
        .unwrap();
        assert!(!other[0].duplicate);
        assert_eq!(queued_rows(s, "idem"), 2);
        // A resend after delivery is still recognised within the window.
        assert_eq!(recv_now(s, "idem", 0).await.unwrap().len(), 2);
        let late = ipc::send(
            s,
            &common::as_user(REALM, "root"),
            Some(named("a")),
            vec![with_id("m1", b"one")],
            OPTS,
        )
        .await
        .unwrap();
        assert!(late[0].duplicate);
        assert_eq!(queued_rows(s, "idem"), 0);
    });
}

fn bad_sends_change_nothing(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        let small = MailboxOptions {
            bytes_max: 1_000,
            log_delivered: false,
        };
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "small", small)
            .await
            .unwrap();
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "big", OPTS)
            .await
            .unwrap();
        // Oversized payload.
        let huge = vec![0u8; ipc::PAYLOAD_BYTES_MAX + 1];
        let e = send1(s, "a", "big", &huge).await.unwrap_err();
        assert!(
            matches!(&e, Error::TooLarge(m) if m.contains("exceeds")),
            "{e}"
        );
        // Full mailbox: 600 fits, the next 600 does not.
        send1(s, "a", "small", &[1; 600]).await.unwrap();
        let e = send1(s, "a", "small", &[2; 600]).await.unwrap_err();
        assert!(matches!(&e, Error::Full(m) if m.contains("full")), "{e}");
        // A multicast with one full receiver sends nothing at all.
        let e = ipc::send(
            s,
            &common::as_user(REALM, "root"),
            None,
            vec![msg("big", &[3; 600]), msg("small", &[3; 600])],
            OPTS,
        )
        .await
        .unwrap_err();
        assert!(matches!(e, Error::Full(_)));
        assert_eq!(queued_rows(s, "big"), 0);
        assert_eq!(queued_rows(s, "small"), 1);
        let info = ipc::mailbox(s, &common::as_user(REALM, "root"), &named("small"))
            .await
            .unwrap();
        assert_eq!((info.queued, info.queued_bytes, info.next_seq), (1, 600, 2));
        // Draining makes room again.
        recv_now(s, "small", 0).await.unwrap();
        send1(s, "a", "small", &[2; 600]).await.unwrap();
        // Bad batches and bounds.
        assert!(
            ipc::send(s, &common::as_user(REALM, "root"), None, vec![], OPTS)
                .await
                .is_err()
        );
        assert!(ipc::create_mailbox(
            s,
            &common::as_user(REALM, "root"),
            "zero",
            MailboxOptions {
                bytes_max: 0,
                log_delivered: false
            }
        )
        .await
        .is_err());
        assert!(
            ipc::create_mailbox(s, &common::as_user(REALM, "root"), "a/b", OPTS)
                .await
                .is_err()
        );
        // A caller in a realm that cannot exist is never made.
        assert!(matches!(
            common::caller("bad realm", "root"),
            Err(Error::Invalid(_))
        ));
        let bad_id = Outgoing {
            to: named("big"),
            payload: vec![],
            message_id: Some("x".repeat(ipc::MESSAGE_ID_BYTES_MAX + 1)),
        };
        assert!(
            ipc::send(s, &common::as_user(REALM, "root"), None, vec![bad_id], OPTS)
                .await
                .is_err()
        );
        assert_eq!(queued_rows(s, "big"), 0);
    });
}

fn unknown_and_proc_mailboxes(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        // Unknown named mailbox: send and receive fail at once.
        assert!(matches!(
            send1(s, "a", "nobody", b"x").await,
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            ipc::recv(
                s,
                &common::as_user(REALM, "root"),
                &named("nobody"),
                Take::default(),
                Duration::from_secs(60),
                std::future::pending()
            )
            .await,
            Err(Error::NotFound(_))
        ));
        // Removing drops queued messages and wakes a waiting receiver.
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "gone", OPTS)
            .await
            .unwrap();
        send1(s, "a", "gone", b"x").await.unwrap();
        assert_eq!(
            ipc::remove_mailbox(s, &common::as_user(REALM, "root"), "gone")
                .await
                .unwrap(),
            1
        );
        assert_eq!(queued_rows(s, "gone"), 0);
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "gone", OPTS)
            .await
            .unwrap();
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move {
                ipc::recv(
                    &s,
                    &common::as_user(REALM, "root"),
                    &named("gone"),
                    Take::default(),
                    Duration::from_secs(60),
                    std::future::pending(),
                )
                .await
            })
        };
        // The waiter has subscribed once its first (empty) receive is done;
        // a remove committed before that makes its first receive fail the same way.
        ipc::remove_mailbox(s, &common::as_user(REALM, "root"), "gone")
            .await
            .unwrap();
        assert!(matches!(waiter.await.unwrap(), Err(Error::NotFound(_))));
        assert!(matches!(
            ipc::remove_mailbox(s, &common::as_user(REALM, "root"), "gone").await,
            Err(Error::NotFound(_))
        ));

        // A proc's mailbox: exists while the proc does.
        realms::create(s, REALM, Scheduler::Fifo).unwrap();
        assert!(matches!(
            send1(s, "a", "proc/p1", b"x").await,
            Err(Error::NotFound(_))
        ));
        let mut d = Descriptor::native("/bin/true");
        d.pid = Some(Pid::new("p1").unwrap());
        procs::spawn(s, REALM, d).await.unwrap();
        assert!(recv_now(s, "proc/p1", 0).await.unwrap().is_empty());
        send1(s, "a", "proc/p1", b"hello").await.unwrap();
        assert_eq!(
            recv_now(s, "proc/p1", 0).await.unwrap()[0].payload,
            b"hello"
        );
        procs::evict(s, REALM, &Pid::new("p1").unwrap())
            .await
            .unwrap();
        let e = send1(s, "a", "proc/p1", b"late").await.unwrap_err();
        assert!(
            matches!(&e, Error::Precondition(m) if m.contains("finished")),
            "{e}"
        );
        assert!(
            ipc::create_mailbox(s, &common::as_user(REALM, "root"), "proc/p2", OPTS)
                .await
                .is_err()
        );
    });
}

fn waiting_receivers_are_woken(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "ping", OPTS)
            .await
            .unwrap();
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "pong", OPTS)
            .await
            .unwrap();
        // An echo task: whatever arrives on ping goes back on pong.
        let echo = {
            let s = s.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    let got = ipc::recv(
                        &s,
                        &common::as_user(REALM, "root"),
                        &named("ping"),
                        Take::messages(1),
                        Duration::from_secs(60),
                        std::future::pending(),
                    )
                    .await
                    .unwrap();
                    let m = &got.messages[0];
                    send1(&s, "echo", "pong", &m.payload).await.unwrap();
                }
            })
        };
        for i in 0..100u32 {
            send1(s, "main", "ping", &i.to_le_bytes()).await.unwrap();
            let got = ipc::recv(
                s,
                &common::as_user(REALM, "root"),
                &named("pong"),
                Take::messages(1),
                Duration::from_secs(60),
                std::future::pending(),
            )
            .await
            .unwrap();
            assert_eq!(got.messages[0].payload, i.to_le_bytes());
            assert_eq!(got.messages[0].sender, "echo");
        }
        echo.await.unwrap();
        // A receive that times out returns nothing; one that is stopped too.
        let none = ipc::recv(
            s,
            &common::as_user(REALM, "root"),
            &named("pong"),
            Take::default(),
            Duration::from_millis(20),
            std::future::pending(),
        )
        .await
        .unwrap();
        assert!(none.messages.is_empty());
        let stopped = ipc::recv(
            s,
            &common::as_user(REALM, "root"),
            &named("pong"),
            Take::default(),
            Duration::from_secs(60),
            std::future::ready(()),
        )
        .await
        .unwrap();
        assert!(stopped.messages.is_empty());
    });
}

fn delivered_messages_can_be_logged(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        let logged = MailboxOptions {
            bytes_max: 1 << 20,
            log_delivered: true,
        };
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "audited", logged).await.unwrap();
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "plain", OPTS).await.unwrap();
        send1(s, "alice", "audited", b"one").await.unwrap();
        send1(s, "alice", "plain", b"two").await.unwrap();
        recv_now(s, "audited", 0).await.unwrap();
        recv_now(s, "plain", 0).await.unwrap();
        let rows = s
            .query(
                "SELECT receiver, sender, payload, recv_us >= sent_us FROM message_log WHERE realm = $1",
                &[REALM.into()],
            )
            .unwrap();
        assert_eq!(rows.len(), 1);
        let r = &rows.rows[0];
        assert_eq!(r.get::<String>(0).unwrap(), "audited");
        assert_eq!(r.get::<String>(1).unwrap(), "alice");
        assert_eq!(r.get::<Vec<u8>>(2).unwrap(), b"one");
        assert!(r.get::<bool>(3).unwrap());
    });
}

/// Waits (yielding, bounded) until `n` receivers of this process wait on
/// `to` for a hand-over.
async fn until_waiting(s: &Store, to: &str, n: usize) {
    for _ in 0..100_000 {
        if ipc::local_waiters(s, REALM, &named(to)) == n {
            return;
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    panic!("{n} receivers never waited on {to}");
}

fn recv_task(s: &Store, to: &str, take: Take) -> tokio::task::JoinHandle<ipc::Received> {
    let (s, to) = (s.clone(), named(to));
    tokio::spawn(async move {
        ipc::recv(
            &s,
            &common::as_user(REALM, "root"),
            &to,
            take,
            Duration::from_secs(60),
            std::future::pending(),
        )
        .await
        .unwrap()
    })
}

fn sends_hand_over_to_waiting_receivers(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "hand", OPTS)
            .await
            .unwrap();
        let mut sub = s.subscribe(&ipc::channel(REALM, &named("hand")));
        // A receiver waits on the empty mailbox; a send gives it the message
        // in the send's own transaction: nothing is queued, nobody notified.
        let waiter = recv_task(s, "hand", Take::default());
        until_waiting(s, "hand", 1).await;
        let seq = send1(s, "a", "hand", b"direct").await.unwrap();
        let got = waiter.await.unwrap();
        assert_eq!(got.messages.len(), 1);
        let m = &got.messages[0];
        assert_eq!(
            (m.seq, m.sender.as_str(), &m.payload[..]),
            (seq, "a", &b"direct"[..])
        );
        assert!(!got.more);
        assert!(
            sub.try_recv().unwrap().is_none(),
            "a hand-over notifies no one"
        );
        assert_eq!(queued_rows(s, "hand"), 0);
        let info = ipc::mailbox(s, &common::as_user(REALM, "root"), &named("hand"))
            .await
            .unwrap();
        assert_eq!(
            (info.queued, info.queued_bytes, info.next_seq),
            (0, 0, seq + 1)
        );
        assert_eq!(ipc::local_waiters(s, REALM, &named("hand")), 0);

        // A batch to one mailbox goes whole to a receiver that can take it
        // whole; one too big for its receive is queued as usual.
        let waiter = recv_task(s, "hand", Take::messages(2));
        until_waiting(s, "hand", 1).await;
        let three = vec![msg("hand", b"1"), msg("hand", b"2"), msg("hand", b"3")];
        ipc::send(s, &common::as_user(REALM, "root"), None, three, OPTS)
            .await
            .unwrap();
        let got = waiter.await.unwrap();
        let payloads: Vec<&[u8]> = got.messages.iter().map(|m| &m.payload[..]).collect();
        assert_eq!(payloads, [b"1", b"2"]);
        assert!(got.more);
        assert_eq!(recv_now(s, "hand", 0).await.unwrap()[0].payload, b"3");
        let waiter = recv_task(s, "hand", Take::messages(2));
        until_waiting(s, "hand", 1).await;
        let two = vec![msg("hand", b"x"), msg("hand", b"y")];
        ipc::send(s, &common::as_user(REALM, "root"), None, two, OPTS)
            .await
            .unwrap();
        assert_eq!(waiter.await.unwrap().messages.len(), 2);
        assert_eq!(queued_rows(s, "hand"), 0);

        // Order: with a message queued (a send with an id is never handed
        // over), a later send queues behind it even though a receiver waits.
        let waiter = recv_task(s, "hand", Take::default());
        until_waiting(s, "hand", 1).await;
        let with_id = Outgoing {
            to: named("hand"),
            payload: b"first".to_vec(),
            message_id: Some("m1".into()),
        };
        ipc::send(
            s,
            &common::as_user(REALM, "root"),
            Some(named("a")),
            vec![with_id],
            OPTS,
        )
        .await
        .unwrap();
        send1(s, "a", "hand", b"second").await.unwrap();
        let mut got: Vec<Vec<u8>> = waiter
            .await
            .unwrap()
            .messages
            .into_iter()
            .map(|m| m.payload)
            .collect();
        got.extend(
            recv_now(s, "hand", 0)
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.payload),
        );
        assert_eq!(got, [b"first".to_vec(), b"second".to_vec()]);

        // A multicast hands over to each mailbox with a waiting receiver,
        // and queues for the others.
        for m in ["m1", "m2", "m3"] {
            ipc::create_mailbox(s, &common::as_user(REALM, "root"), m, OPTS)
                .await
                .unwrap();
        }
        let mut subs: Vec<_> = ["m1", "m2"]
            .iter()
            .map(|m| s.subscribe(&ipc::channel(REALM, &named(m))))
            .collect();
        let w1 = recv_task(s, "m1", Take::default());
        let w2 = recv_task(s, "m2", Take::default());
        until_waiting(s, "m1", 1).await;
        until_waiting(s, "m2", 1).await;
        let multicast = vec![msg("m2", b"all"), msg("m1", b"all"), msg("m3", b"all")];
        let sent = ipc::send(
            s,
            &common::as_user(REALM, "root"),
            Some(named("a")),
            multicast,
            OPTS,
        )
        .await
        .unwrap();
        for (w, seq) in [(w2, sent[0].seq), (w1, sent[1].seq)] {
            let got = w.await.unwrap().messages;
            assert_eq!(got.len(), 1);
            assert_eq!((got[0].seq, &got[0].payload[..]), (seq, &b"all"[..]));
        }
        for sub in &mut subs {
            assert!(
                sub.try_recv().unwrap().is_none(),
                "handed over, not notified"
            );
        }
        assert_eq!((queued_rows(s, "m1"), queued_rows(s, "m2")), (0, 0));
        assert_eq!(recv_now(s, "m3", 0).await.unwrap()[0].payload, b"all");

        // A receiver whose wait runs out is no longer waiting, and a send
        // after it is queued.
        let none = ipc::recv(
            s,
            &common::as_user(REALM, "root"),
            &named("hand"),
            Take::default(),
            Duration::from_millis(5),
            std::future::pending(),
        )
        .await
        .unwrap();
        assert!(none.messages.is_empty());
        assert_eq!(ipc::local_waiters(s, REALM, &named("hand")), 0);
        send1(s, "a", "hand", b"later").await.unwrap();
        assert_eq!(queued_rows(s, "hand"), 1);
        assert_eq!(recv_now(s, "hand", 0).await.unwrap()[0].payload, b"later");
    });
}

/// Senders race receivers that wait briefly, or are cancelled mid-wait:
/// every message is received exactly once, whether it was handed over,
/// queued, or handed to a receiver that went away and put back.
fn hand_over_loses_nothing_when_receivers_give_up(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    let senders = 4u32;
    let per: u32 = std::env::var("TABOS_STRESS_MESSAGES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .map_or(500, |n| (n / senders).clamp(50, 500));
    let total = senders * per;
    rt().block_on(async {
        ipc::create_mailbox(s, &common::as_user(REALM, "root"), "churn", OPTS)
            .await
            .unwrap();
        let seen = Arc::new(std::sync::Mutex::new(vec![0u8; total as usize]));
        let count = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut receivers = Vec::new();
        for r in 0..3u32 {
            let (s, seen, count) = (s.clone(), seen.clone(), count.clone());
            receivers.push(tokio::spawn(async move {
                let mut round = 0u32;
                let churn = named("churn");
                while count.load(std::sync::atomic::Ordering::SeqCst) < total {
                    round += 1;
                    let root = common::as_user(REALM, "root");
                    let recv = ipc::recv(
                        &s,
                        &root,
                        &churn,
                        Take::messages(1 + (round % 3) as usize),
                        Duration::from_micros(u64::from(50 + (round * 37 + r * 11) % 400)),
                        std::future::pending(),
                    );
                    // Every third receive is cancelled mid-wait: its future
                    // is dropped, as when a client goes away.
                    let got = if round % 3 == r % 3 {
                        let limit = Duration::from_micros(u64::from(20 + (round * 13) % 200));
                        match tokio::time::timeout(limit, recv).await {
                            Ok(got) => got.unwrap(),
                            Err(_) => continue,
                        }
                    } else {
                        recv.await.unwrap()
                    };
                    for m in got.messages {
                        let i = u32::from_le_bytes(m.payload[..4].try_into().unwrap());
                        seen.lock().unwrap()[i as usize] += 1;
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                }
            }));
        }
        let mut send_tasks = Vec::new();
        for w in 0..senders {
            let s = s.clone();
            send_tasks.push(tokio::spawn(async move {
                for k in 0..per {
                    let i = w * per + k;
                    send1(&s, &format!("s{w}"), "churn", &i.to_le_bytes())
                        .await
                        .unwrap();
                    if k % 8 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            }));
        }
        for t in send_tasks {
            t.await.unwrap();
        }
        // Bounded: the receivers stop once everything has arrived.
        tokio::time::timeout(Duration::from_secs(120), async {
            for t in receivers {
                t.await.unwrap();
            }
        })
        .await
        .expect("every message is received");
        let wrong: Vec<(usize, u8)> = {
            let seen = seen.lock().unwrap();
            (0..seen.len())
                .filter(|&i| seen[i] != 1)
                .map(|i| (i, seen[i]))
                .collect()
        };
        assert!(
            wrong.is_empty(),
            "messages not received exactly once (index, times): {:?}",
            &wrong[..wrong.len().min(10)]
        );
        // Requeues run on their own: wait for the counters to settle.
        for _ in 0..1_000 {
            if queued_rows(s, "churn") == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(queued_rows(s, "churn"), 0);
        let info = ipc::mailbox(s, &common::as_user(REALM, "root"), &named("churn"))
            .await
            .unwrap();
        assert_eq!((info.queued, info.queued_bytes), (0, 0));
        assert_eq!(ipc::local_waiters(s, REALM, &named("churn")), 0);
    });
}

/// `pid`'s message events, `EVENT DETAIL`, in order.
fn message_events(s: &Store, pid: &str) -> Vec<String> {
    s.query(
        "SELECT event, detail FROM proc_event WHERE realm = $1 AND pid = $2 \
         AND event IN ('send', 'recv') ORDER BY seq",
        &[REALM.into(), pid.into()],
    )
    .unwrap()
    .iter()
    .map(|r| {
        format!(
            "{} {}",
            r.get::<String>(0).unwrap(),
            r.get::<String>(1).unwrap()
        )
    })
    .collect()
}

/// A proc's sends (from its own address) and its receipts (of its own
/// mailbox) are its provenance events, naming the mailbox and the seqs so
/// that a send and its receipt meet — also when the send hands its
/// messages straight to the waiting receiver; a client's sends and named
/// mailboxes note nothing.
fn procs_sends_and_receipts_are_their_provenance(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        realms::create(s, REALM, Scheduler::Fifo).unwrap();
        for pid in ["a", "b"] {
            let mut d = Descriptor::native("/bin/true");
            d.pid = Some(Pid::new(pid).unwrap());
            procs::spawn(s, REALM, d).await.unwrap();
        }
        // Queued: two messages in one send, received together.
        let root = common::as_user(REALM, "root");
        let two = vec![msg("proc/b", b"one"), msg("proc/b", b"three")];
        ipc::send(s, &root, Some(named("proc/a")), two, OPTS)
            .await
            .unwrap();
        assert_eq!(recv_now(s, "proc/b", 0).await.unwrap().len(), 2);
        // Handed over: b waits, a sends.
        let waiter = recv_task(s, "proc/b", Take::default());
        until_waiting(s, "proc/b", 1).await;
        send1(s, "proc/a", "proc/b", b"handed").await.unwrap();
        assert_eq!(waiter.await.unwrap().messages[0].payload, b"handed");
        // A client's send to b, and a's send to a named mailbox.
        ipc::send(s, &root, None, vec![msg("proc/b", b"anon")], OPTS)
            .await
            .unwrap();
        ipc::create_mailbox(s, &root, "box", OPTS).await.unwrap();
        send1(s, "proc/a", "box", b"boxed").await.unwrap();
        recv_now(s, "box", 0).await.unwrap();
        assert_eq!(
            message_events(s, "a"),
            [
                "send proc/b #1-2 +8",
                "send proc/b #3-3 +6",
                "send box #1-1 +5"
            ]
        );
        // b's receipt of the anonymous message is noted when it takes it.
        assert_eq!(recv_now(s, "proc/b", 0).await.unwrap().len(), 1);
        assert_eq!(
            message_events(s, "b"),
            [
                "recv proc/b #1-2 +8",
                "recv proc/b #3-3 +6",
                "recv proc/b #4-4 +4"
            ]
        );
    });
}

/// What a proc's own credential sends — from another address than its
/// own, or from none — and takes from a named mailbox is its provenance as
/// well, in the send's or receive's own transaction; a receipt it waits
/// for too (handed over: noted in the sender's transaction, for the proc
/// the claimed waiter acts for).
fn a_procs_messages_through_named_mailboxes_are_its_provenance(b: Backend) {
    let Some(f) = b.open() else { return };
    let s = &f.store;
    rt().block_on(async {
        realms::create(s, REALM, Scheduler::Fifo).unwrap();
        for pid in ["a", "b"] {
            let mut d = Descriptor::native("/bin/true");
            d.pid = Some(Pid::new(pid).unwrap());
            procs::spawn(s, REALM, d).await.unwrap();
        }
        let proc_caller = |pid: &str| {
            tabos_kernel::auth::Caller::of_started_proc(
                REALM,
                &Pid::new(pid).unwrap(),
                "root",
                None,
            )
            .unwrap()
        };
        let (a, b) = (proc_caller("a"), proc_caller("b"));
        let root = common::as_user(REALM, "root");
        ipc::create_mailbox(s, &root, "box", OPTS).await.unwrap();
        // a sends from no address, then from the named one.
        ipc::send(s, &a, None, vec![msg("box", b"one")], OPTS)
            .await
            .unwrap();
        ipc::send(s, &a, Some(named("box")), vec![msg("proc/b", b"two")], OPTS)
            .await
            .unwrap();
        // b takes from box with its own credential: queued, then waited for.
        let took = ipc::recv(
            s,
            &b,
            &named("box"),
            Take::default(),
            Duration::ZERO,
            std::future::pending(),
        )
        .await
        .unwrap();
        assert_eq!(took.messages[0].payload, b"one");
        let waiting = {
            let (s, b) = (s.clone(), b.clone());
            tokio::spawn(async move {
                ipc::recv(
                    &s,
                    &b,
                    &named("box"),
                    Take::default(),
                    Duration::from_secs(60),
                    std::future::pending(),
                )
                .await
                .unwrap()
            })
        };
        // Waiting in this process: the send hands it over.
        until_waiting(s, "box", 1).await;
        ipc::send(s, &a, None, vec![msg("box", b"three")], OPTS)
            .await
            .unwrap();
        assert_eq!(waiting.await.unwrap().messages[0].payload, b"three");
        // The root client's own receipt from box notes nothing.
        ipc::send(s, &root, None, vec![msg("box", b"four")], OPTS)
            .await
            .unwrap();
        recv_now(s, "box", 0).await.unwrap();
        assert_eq!(
            message_events(s, "a"),
            [
                "send box #1-1 +3",
                "send proc/b #1-1 +3",
                "send box #2-2 +5"
            ]
        );
        assert_eq!(
            message_events(s, "b"),
            ["recv box #1-1 +3", "recv box #2-2 +5"]
        );
    });
}
