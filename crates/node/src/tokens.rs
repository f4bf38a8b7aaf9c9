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

use crate::{kernel_status, Node};

pub struct TokensService {
    node: Node,
}

impl TokensService {
    pub fn new(node: Node) -> TokensService {
        TokensService { node }
    }
}

fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
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
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        let role: Role = crate::wire::request("role", r.role)?.unwrap_or(Role::Member);
        // Never more than the creator: admins up to admin, in their realm.
        access.require(Role::Admin)?;
        access.require(role)?;
        let realm = if role == Role::Operator {
            if !r.realm.is_empty() {
                return Err(invalid("an operator credential names no realm"));
            }
            String::new()
        } else {
            access.realm(&r.realm, Role::Admin)?
        };
        let user = match r.user.as_str() {
            "" if role >= Role::Admin => "root".to_string(),
            "" => role.as_str().to_string(),
            u => u.to_string(),
        };
        if r.ttl_ms > TTL_MS_MAX {
            return Err(invalid(format!(
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
                s => Some(auth::Scope::parse(s).map_err(|e| kernel_status(&e))?),
            },
        };
        let note = spec.note.clone();
        let (minted, principal) = self
            .node
            .auth
            .create(spec)
            .await
            .map_err(|e| kernel_status(&e))?;
        let mut info = principal_to_proto(&principal);
        info.created_us = now;
        info.note = note;
        Ok(Response::new(proto::CreatedToken {
            info: Some(info),
            token: minted.token,
        }))
    }

    async fn list(
        &self,
        request: Request<proto::ListTokensRequest>,
    ) -> Result<Response<proto::ListTokensResponse>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        access.require(Role::Admin)?;
        let realm = if access.principal.is_operator() {
            (!r.realm.is_empty()).then_some(r.realm)
        } else {
            Some(access.realm(&r.realm, Role::Admin)?)
        };
        let store = self.node.store.clone();
        let list =
            tokio::task::spawn_blocking(move || auth::list(&store, realm.as_deref(), r.procs))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(|e| kernel_status(&e))?;
        Ok(Response::new(proto::ListTokensResponse {
            tokens: list.iter().map(info_to_proto).collect(),
        }))
    }

    async fn revoke(
        &self,
        request: Request<proto::RevokeTokenRequest>,
    ) -> Result<Response<proto::Empty>, Status> {
        let access = self.node.access(&request)?;
        let r = request.into_inner();
        access.require(Role::Admin)?;
        let id = CredentialId::new(r.id).map_err(|e| kernel_status(&e))?;
        let realm = (!access.principal.is_operator()).then(|| access.principal.realm().to_string());
        auth::revoke(&self.node.store, &id, realm.as_deref())
            .await
            .map_err(|e| kernel_status(&e))?;
        self.node.auth.forget(&id);
        Ok(Response::new(proto::Empty {}))
    }

    async fn who_am_i(
        &self,
        request: Request<proto::Empty>,
    ) -> Result<Response<proto::TokenInfo>, Status> {
        let access = self.node.access(&request)?;
        let default_realm = access.realm("", Role::Reader)?;
        let p: Arc<Principal> = access.principal;
        Ok(Response::new(proto::TokenInfo {
            default_realm,
            ..principal_to_proto(&p)
        }))
    }
}
