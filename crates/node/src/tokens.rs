//! The `Tokens` service: create, list and revoke credentials
//! ([`tabos_kernel::auth`]).
//!
//! Who may do what: a realm's admins manage their realm's credentials
//! (any role up to admin); operators manage every realm's, and create
//! operator credentials. A credential is never more than its creator's
//! realm and role. The token is in the Create reply and nowhere else.

use std::sync::Arc;

use tabos_client::proto;
use tabos_kernel::auth::{self, CredentialId, Principal, Role, Spec};
use tonic::{Request, Response, Status};

use crate::Node;

pub struct TokensService {
    node: Node,
}

impl TokensService {
    pub fn new(node: Node) -> TokensService {
        TokensService { node }
    }
}

/// The protocol's view of a credential.
pub fn info_to_proto(i: &auth::Info) -> proto::TokenInfo {
    let mut t = principal_to_proto(&i.principal);
    t.created_us = i.created_us;
    t.revoked_us = i.revoked_us;
    t.note = i.note.clone();
    t
}

fn principal_to_proto(p: &Principal) -> proto::TokenInfo {
    proto::TokenInfo {
        id: p.id().to_string(),
        realm: p.realm().to_string(),
        user: p.user().to_string(),
        role: crate::wire::out(p.role()),
        pid: p.pid().as_ref().map(|p| p.to_string()).unwrap_or_default(),
        created_us: 0,
        expires_us: p.expires_us(),
        revoked_us: None,
        note: String::new(),
        scope: p
            .scope()
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        default_realm: String::new(),
    }
}

/// Longest lifetime a credential may be given: ten years, in ms.
pub const TTL_MS_MAX: u64 = 10 * 365 * 24 * 3600 * 1000;

#[tonic::async_trait]
impl proto::tokens_server::Tokens for TokensService {
    async fn create(
        &self,
        request: Request<proto::CreateTokenRequest>,
    ) -> Result<Response<proto::CreatedToken>, Status> {
        self.node.on::<ops::Create>(request).await
    }

    async fn list(
        &self,
        request: Request<proto::ListTokensRequest>,
    ) -> Result<Response<proto::ListTokensResponse>, Status> {
        self.node.on::<ops::List>(request).await
    }

    async fn revoke(
        &self,
        request: Request<proto::RevokeTokenRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        self.node.on::<ops::Revoke>(request).await
    }

    /// The credential itself, and the realm it acts in by default: no
    /// operation of the kernel, so the one handler that reads the principal.
    async fn who_am_i(
        &self,
        request: Request<proto::Empty>,
    ) -> Result<Response<proto::TokenInfo>, Status> {
        let who = self.node.caller_of(&request)?;
        let p: Arc<Principal> = crate::auth::caller(&request)?;
        Ok(Response::new(proto::TokenInfo {
            default_realm: who.realm().to_string(),
            ..principal_to_proto(&p)
        }))
    }
}

/// The service's operations; the kernel's `auth::*_for` check the caller.
pub mod ops {
    use super::*;
    use crate::op::op;
    use tabos_kernel::Error;

    op!(Create(CreateTokenRequest) -> CreatedToken, |node, who, r| {
        let role: Role = crate::wire::field("role", r.role)?.unwrap_or(Role::Member);
        let realm = match role {
            Role::Operator if !r.realm.is_empty() => {
                return Err(Error::Invalid("an operator credential names no realm".into()))
            }
            Role::Operator => String::new(),
            _ => who.realm().to_string(),
        };
        let user = match r.user.as_str() {
            "" if role >= Role::Admin => auth::ROOT.to_string(),
            "" => role.as_str().to_string(),
            u => u.to_string(),
        };
        if r.ttl_ms > TTL_MS_MAX {
            return Err(Error::Invalid(format!(
                "a credential's lifetime is at most {TTL_MS_MAX} ms"
            )));
        }
        let now = tabos_store::now_us();
        let spec = Spec {
            realm,
            user,
            role,
            pid: None,
            expires_us: (r.ttl_ms > 0).then(|| now + r.ttl_ms as i64 * 1000),
            note: r.note,
            scope: match r.scope.trim() {
                "" => None,
                s => Some(auth::Scope::parse(s)?),
            },
        };
        let note = spec.note.clone();
        let (minted, principal) = node.auth.create_for(&who, spec).await?;
        let mut info = principal_to_proto(&principal);
        info.created_us = now;
        info.note = note;
        Ok(proto::CreatedToken {
            info: Some(info),
            token: minted.token,
        })
    });

    op!(List(ListTokensRequest) -> ListTokensResponse, |node, who, r| {
        let list = auth::list_for(&node.store, &who, r.realm.is_empty(), r.procs).await?;
        Ok(proto::ListTokensResponse {
            tokens: list.iter().map(info_to_proto).collect(),
        })
    });

    op!(Revoke(RevokeTokenRequest) -> Empty, |node, who, r| {
        let id = CredentialId::new(r.id)?;
        auth::revoke_for(&node.store, &who, &id).await?;
        node.auth.forget(&id);
        Ok(proto::Empty {})
    });
}
