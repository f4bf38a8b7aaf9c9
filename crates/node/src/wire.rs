//! The kernel's enums on the wire: one table per enum maps the kernel's
//! value to the proto's and back, and a request's enum field is read in one
//! place ([`request`]): unspecified is the request's default, a number no
//! value has is INVALID_ARGUMENT. The kernel's words for the values (its
//! columns' text) are `tabos_client::states`'s names; the tests hold the
//! two equal.

use tabos_client::proto;
use tonic::Status;

/// A kernel enum with a proto twin.
pub trait Wire: Copy + Sized {
    type Proto: TryFrom<i32> + Copy;
    fn to_wire(self) -> Self::Proto;
    /// The kernel's value; `None` for the proto's unspecified value.
    fn of_wire(p: Self::Proto) -> Option<Self>;
}

macro_rules! wire {
    ($k:path => $p:ident { $($kv:ident => $pv:ident),+ $(,)? }) => {
        impl Wire for $k {
            type Proto = proto::$p;
            fn to_wire(self) -> proto::$p {
                match self {
                    $(Self::$kv => proto::$p::$pv,)+
                }
            }
            fn of_wire(p: proto::$p) -> Option<Self> {
                match p {
                    proto::$p::Unspecified => None,
                    $(proto::$p::$pv => Some(Self::$kv),)+
                }
            }
        }
    };
}

wire!(tabos_kernel::procs::State => ProcState {
    Spawned => Spawned, Claimed => Claimed, Running => Running,
    Exited => Exited, Evicted => Evicted, Failed => Failed,
});
wire!(tabos_kernel::nodes::NodeState => NodeState {
    Up => Up, Draining => Draining, Left => Left, Lost => Lost,
});
wire!(tabos_kernel::auth::Role => Role {
    Reader => Reader, Member => Member, Admin => Admin, Operator => Operator,
});
wire!(tabos_kernel::procs::Kind => ProcKind { Native => Native, Wasm => Wasm });
wire!(tabos_kernel::procs::Class => ProcClass { Lc => Lc, Be => Be });
wire!(tabos_kernel::realms::Scheduler => Scheduler {
    Fifo => Fifo, Locality => Locality, LeastLoaded => LeastLoaded,
});
wire!(tabos_kernel::realms::Provenance => Provenance { Procs => Procs, All => All });
wire!(tabos_kernel::names::Kind => NameKind { Dir => Dir, File => File, Symlink => Symlink });
wire!(tabos_kernel::fs::FileType => FileType { Dir => Dir, File => File, Symlink => Symlink, Fifo => Fifo });
wire!(tabos_kernel::fs::Access => FsAccess { Read => Read, Write => Write, ReadWrite => ReadWrite });
wire!(tabos_kernel::workflows::Status => WorkflowStatus {
    Enqueued => Enqueued, Pending => Pending, Success => Success,
    Error => Error, Cancelled => Cancelled,
});
wire!(tabos_kernel::workflows::StepKind => StepKind {
    Function => Function, Procedure => Procedure, Proc => Proc, Sleep => Sleep,
    Send => Send, Recv => Recv, SetEvent => SetEvent, GetEvent => GetEvent,
});
wire!(tabos_kernel::graphs::Kind => TaskKind {
    Procedure => Procedure, Workflow => Workflow, Proc => Proc,
});
wire!(tabos_kernel::graphs::GraphStatus => GraphStatus {
    Running => Running, Success => Success, Error => Error, Cancelled => Cancelled,
});
wire!(tabos_kernel::graphs::TaskStatus => TaskStatus {
    Waiting => Waiting, Ready => Ready, Running => Running, Success => Success,
    Error => Error, Cancelled => Cancelled,
});
wire!(tabos_kernel::realms::StorageClass => StorageClass {
    Kv => Kv, Names => Names, Files => Files, Mail => QueuedMail,
    Delivered => DeliveredMail, Code => Code, Workflows => Workflows, Tables => Tables,
    Logs => Logs,
});

/// The kernel's value as an `i32` field.
pub fn out<K: Wire>(k: K) -> i32
where
    K::Proto: Into<i32>,
{
    k.to_wire().into()
}

/// A request's enum field `what`, for an operation's body
/// ([`crate::op::Op::run`]): the kernel's value, or `None` when it is
/// unspecified (the caller applies the request's default); a number no
/// value has (a newer client's, or garbage) is an invalid argument.
pub fn field<K: Wire>(what: &str, v: i32) -> tabos_kernel::Result<Option<K>> {
    let p = K::Proto::try_from(v)
        .map_err(|_| tabos_kernel::Error::Invalid(format!("{what}: no value is numbered {v}")))?;
    Ok(K::of_wire(p))
}

/// A request's enum field with no kernel twin (the kernel keeps it as
/// text, or it only steers the node): the proto value, `None` when
/// unspecified; INVALID_ARGUMENT for a number no value has.
pub fn request_proto<P: TryFrom<i32> + Default + PartialEq>(
    what: &str,
    v: i32,
) -> Result<Option<P>, Status> {
    field_proto(what, v).map_err(|e| crate::kernel_status(&e))
}

/// [`request_proto`] for an operation's body: the refusal a kernel error.
pub fn field_proto<P: TryFrom<i32> + Default + PartialEq>(
    what: &str,
    v: i32,
) -> tabos_kernel::Result<Option<P>> {
    let p = P::try_from(v)
        .map_err(|_| tabos_kernel::Error::Invalid(format!("{what}: no value is numbered {v}")))?;
    Ok((p != P::default()).then_some(p))
}

/// A proto enum field the kernel keeps as text (a watch's op, a manager's
/// name, a step's status): its value by the kernel's word, unspecified for
/// a word the API does not know (a newer kernel's).
pub fn of_text<P: Default>(word: &str, from_name: fn(&str) -> Option<P>) -> P {
    from_name(word).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tabos_kernel::{auth, fs, graphs, names, nodes, procs, realms, workflows};

    /// Each value's wire name is the kernel's word for it, and it comes
    /// back as itself.
    fn same<K: Wire + PartialEq + std::fmt::Debug>(
        values: &[K],
        word: fn(K) -> String,
        name: fn(K::Proto) -> &'static str,
    ) {
        for &k in values {
            assert_eq!(name(k.to_wire()), word(k), "{k:?}");
            assert_eq!(K::of_wire(k.to_wire()), Some(k));
        }
    }

    #[test]
    fn every_value_keeps_its_kernel_name_and_comes_back() {
        use procs::State as S;
        same(
            &[
                S::Spawned,
                S::Claimed,
                S::Running,
                S::Exited,
                S::Evicted,
                S::Failed,
            ],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use nodes::NodeState as N;
        same(
            &[N::Up, N::Draining, N::Left, N::Lost],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use auth::Role as R;
        same(
            &[R::Reader, R::Member, R::Admin, R::Operator],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        same(
            &[procs::Kind::Native, procs::Kind::Wasm],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        same(
            &[procs::Class::Lc, procs::Class::Be],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use realms::Scheduler as Sch;
        same(
            &[Sch::Fifo, Sch::Locality, Sch::LeastLoaded],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        same(
            &[realms::Provenance::Procs, realms::Provenance::All],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use names::Kind as NK;
        same(
            &[NK::Dir, NK::File, NK::Symlink],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        same(
            &[
                fs::FileType::Dir,
                fs::FileType::File,
                fs::FileType::Symlink,
                fs::FileType::Fifo,
            ],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use workflows::Status as W;
        same(
            &[W::Enqueued, W::Pending, W::Success, W::Error, W::Cancelled],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use workflows::StepKind as SK;
        same(
            &[
                SK::Function,
                SK::Procedure,
                SK::Proc,
                SK::Sleep,
                SK::Send,
                SK::Recv,
                SK::SetEvent,
                SK::GetEvent,
            ],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        same(
            &[
                graphs::Kind::Procedure,
                graphs::Kind::Workflow,
                graphs::Kind::Proc,
            ],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use graphs::GraphStatus as G;
        same(
            &[G::Running, G::Success, G::Error, G::Cancelled],
            |k| k.as_str().into(),
            |p| p.name(),
        );
        use graphs::TaskStatus as T;
        same(
            &[
                T::Waiting,
                T::Ready,
                T::Running,
                T::Success,
                T::Error,
                T::Cancelled,
            ],
            |k| k.as_str().into(),
            |p| p.name(),
        );
    }

    #[test]
    fn an_unknown_number_is_invalid_and_zero_is_the_default() {
        let e = crate::kernel_status(&field::<procs::Kind>("kind", 99).unwrap_err());
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(field::<procs::Kind>("kind", 0).unwrap(), None);
        assert_eq!(
            field::<procs::Kind>("kind", 2).unwrap(),
            Some(procs::Kind::Wasm)
        );
    }

    #[test]
    fn the_kernels_text_values_are_the_apis_names() {
        for op in ["create", "set", "remove"] {
            assert_eq!(of_text(op, proto::WatchOp::from_name).name(), op);
        }
        for s in ["running", "success", "error"] {
            assert_eq!(of_text(s, proto::StepStatus::from_name).name(), s);
        }
        assert_eq!(
            of_text(tabos_kernel::alloc::SMGR, proto::AllocManager::from_name).name(),
            "smgr"
        );
    }
}
