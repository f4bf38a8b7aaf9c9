//! Where the service keeps its state in the realm's namespace, and the
//! shard map.
//!
//! * `/kv/<svc>/config` — the [`Config`]: the shard → group map and its
//!   epoch, as JSON. Clerks cache it and re-read it when a kvd answers
//!   `MOVED` (the key's shard is not, or no longer, its group's).
//! * `/kv/<svc>/groups/<g>/` — group `g`'s election (σOS leader election:
//!   the `leader` symlink's target is the leading kvd's address), and its
//!   log: `log/<seq>`, one entry per write batch of its leader with the ops
//!   of every shard the batch touched, each append fenced by `log-epoch`
//!   (advanced by each new leader, so an earlier one appends no more).
//! * `/kv/<svc>/shard/<s>/` — shard `s`'s durable state: `epoch` (advanced
//!   by whoever takes the shard: a group's new leader, a mover) and `snap`
//!   (the snapshot pointer: the tabos fs file holding the shard's pairs up
//!   to an entry of a group's log, whose later entries hold its later
//!   ops). Every write under it carries the taker's epoch as a fence, so
//!   once a shard is taken, its previous holder can write nothing more.
//!   (`log/<seq>`: a shard's own log, from before the group logs.)

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Most shards a service may have (fixed when it is created, σOS-style).
pub const SHARDS_MAX: u32 = 1_024;
/// Most groups a service may have.
pub const GROUPS_MAX: u32 = 64;
/// Longest service name.
pub const SERVICE_BYTES_MAX: usize = 64;

/// The shard → group map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Bumped by every change of the map.
    pub epoch: i64,
    /// The group serving each shard, by shard number.
    pub shards: Vec<u32>,
    /// The groups in service (each has kvds campaigning for it).
    pub groups: Vec<u32>,
    /// Shards on their way to another group: no group serves them (a
    /// request for one is told to try again) until the move ends.
    #[serde(default)]
    pub moving: Vec<u32>,
    /// The map a move in progress ends with (`shards` once it is done).
    #[serde(default)]
    pub target: Option<Vec<u32>>,
    /// Keys are placed by their hash tag ([`hash_tag`]), as in Redis
    /// Cluster, so that `{user1}:a` and `{user1}:b` share a shard. Every
    /// service created since has it; one created before keeps placing by
    /// the whole key (its keys stay where they are).
    #[serde(default)]
    pub hash_tags: bool,
}

impl Config {
    /// The first map: `shards` shards spread over groups `0..groups`.
    pub fn initial(shards: u32, groups: u32) -> Result<Config> {
        if shards == 0 || shards > SHARDS_MAX {
            return Err(Error::Invalid(format!("shards must be 1..={SHARDS_MAX}")));
        }
        if groups == 0 || groups > GROUPS_MAX.min(shards) {
            return Err(Error::Invalid(format!(
                "groups must be 1..={} (and no more than shards)",
                GROUPS_MAX.min(shards)
            )));
        }
        Ok(Config {
            epoch: 1,
            shards: (0..shards).map(|s| s % groups).collect(),
            groups: (0..groups).collect(),
            moving: Vec::new(),
            target: None,
            hash_tags: true,
        })
    }

    pub fn from_json(bytes: &[u8]) -> Result<Config> {
        let c: Config = serde_json::from_slice(bytes)
            .map_err(|e| Error::Invalid(format!("the service's config is not valid: {e}")))?;
        c.check()?;
        Ok(c)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a config serializes")
    }

    /// Its invariants: every shard's group is in service, within limits.
    pub fn check(&self) -> Result<()> {
        let n = self.shards.len();
        if n == 0 || n > SHARDS_MAX as usize || self.groups.len() > GROUPS_MAX as usize {
            return Err(Error::Invalid(
                "the config's shards or groups are out of bounds".into(),
            ));
        }
        if let Some(s) = self.shards.iter().find(|g| !self.groups.contains(g)) {
            return Err(Error::Invalid(format!(
                "the config maps a shard to group {s}, which is not in service"
            )));
        }
        if self.moving.iter().any(|s| *s as usize >= n) {
            return Err(Error::Invalid(
                "the config moves a shard it does not have".into(),
            ));
        }
        if let Some(t) = &self.target {
            if t.len() != n || t.iter().any(|g| !self.groups.contains(g)) {
                return Err(Error::Invalid(
                    "the config's target map does not fit its shards and groups".into(),
                ));
            }
        }
        Ok(())
    }

    /// Whether shard `s` is served by group `g` now (not moving).
    pub fn serves(&self, g: u32, s: u32) -> bool {
        self.shards.get(s as usize) == Some(&g) && !self.moving.contains(&s)
    }

    /// The shard of `key`.
    pub fn shard_of(&self, key: &[u8]) -> u32 {
        let placed_by = if self.hash_tags { hash_tag(key) } else { key };
        shard_of(placed_by, self.shards.len() as u32)
    }

    /// The group serving `key`.
    pub fn group_of(&self, key: &[u8]) -> u32 {
        self.shards[self.shard_of(key) as usize]
    }

    /// The shards group `g` serves (not those moving away from it).
    pub fn shards_of(&self, g: u32) -> Vec<u32> {
        (0..self.shards.len() as u32)
            .filter(|s| self.serves(g, *s))
            .collect()
    }

    /// A map over `groups` that moves few shards from this one: each group
    /// ends with ⌊n/k⌋ or ⌈n/k⌉ shards; shards stay where they are unless
    /// their group left or has too many. The epoch is bumped.
    pub fn rebalanced(&self, groups: &[u32]) -> Result<Config> {
        if groups.is_empty() || groups.len() > GROUPS_MAX as usize {
            return Err(Error::Invalid(format!("1..={GROUPS_MAX} groups")));
        }
        let n = self.shards.len();
        let k = groups.len();
        let mut groups = groups.to_vec();
        groups.sort_unstable();
        groups.dedup();
        // Quotas: the first n % k groups (in order) take one more.
        let quota = |i: usize| n / k + usize::from(i < n % k);
        let mut shards = self.shards.clone();
        let mut count = vec![0usize; groups.len()];
        let mut free = Vec::new();
        for (s, g) in self.shards.iter().enumerate() {
            match groups.iter().position(|x| x == g) {
                Some(i) if count[i] < quota(i) => count[i] += 1,
                _ => free.push(s),
            }
        }
        for s in free {
            let i = (0..groups.len())
                .find(|i| count[*i] < quota(*i))
                .expect("quotas add up to the shards");
            count[i] += 1;
            shards[s] = groups[i];
        }
        let c = Config {
            epoch: self.epoch + 1,
            shards,
            groups,
            moving: Vec::new(),
            target: None,
            hash_tags: self.hash_tags,
        };
        c.check()?;
        Ok(c)
    }
}

/// How the balancer runs the service: kvds per group, and when it adds
/// or removes groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// kvds per group: one leads, the others stand by.
    pub kvds_per_group: u32,
    /// Fewest groups.
    pub min_groups: u32,
    /// Most groups.
    pub max_groups: u32,
    /// A group whose leader serves more requests per second than this
    /// for `grow_after_ms` gets help: a group is added.
    pub grow_ops: f64,
    /// Below this many requests per second per group (all groups' load
    /// spread over one group fewer), a group is removed.
    pub shrink_ops: f64,
    /// How long the load must stay low before a group is removed, in ms.
    pub shrink_after_ms: u64,
    /// How long a group's load must stay high before a group is added, in
    /// ms (a burst does not grow the service).
    #[serde(default = "grow_after_default")]
    pub grow_after_ms: u64,
    /// Group log entries per shard served before a group's leader
    /// snapshots its shards and trims its log (at most
    /// [`crate::shard::LOG_COMPACT_MAX`] entries whatever the shards;
    /// 1..=that).
    #[serde(default = "compact_at_default")]
    pub compact_at: u32,
}

fn compact_at_default() -> u32 {
    crate::shard::LOG_COMPACT_AT
}

fn grow_after_default() -> u64 {
    2_000
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            kvds_per_group: 2,
            min_groups: 1,
            max_groups: 1,
            grow_ops: 20_000.0,
            shrink_ops: 5_000.0,
            shrink_after_ms: 10_000,
            grow_after_ms: grow_after_default(),
            compact_at: compact_at_default(),
        }
    }
}

/// Most kvds per group.
pub const KVDS_PER_GROUP_MAX: u32 = 8;

impl Policy {
    pub fn check(&self) -> Result<()> {
        if self.kvds_per_group == 0 || self.kvds_per_group > KVDS_PER_GROUP_MAX {
            return Err(Error::Invalid(format!(
                "kvds per group must be 1..={KVDS_PER_GROUP_MAX}"
            )));
        }
        if self.min_groups == 0 || self.min_groups > self.max_groups || self.max_groups > GROUPS_MAX
        {
            return Err(Error::Invalid(format!(
                "groups must satisfy 1 <= min <= max <= {GROUPS_MAX}"
            )));
        }
        if self.compact_at == 0 || self.compact_at > crate::shard::LOG_COMPACT_MAX {
            return Err(Error::Invalid(format!(
                "compact_at must be 1..={}",
                crate::shard::LOG_COMPACT_MAX
            )));
        }
        if !(self.grow_ops > self.shrink_ops && self.shrink_ops >= 0.0) {
            return Err(Error::Invalid(
                "the load to grow at must be over the load to shrink at".into(),
            ));
        }
        Ok(())
    }

    pub fn from_json(bytes: &[u8]) -> Result<Policy> {
        let p: Policy = serde_json::from_slice(bytes)
            .map_err(|e| Error::Invalid(format!("the service's policy is not valid: {e}")))?;
        p.check()?;
        Ok(p)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a policy serializes")
    }
}

/// The part of `key` that places it, as Redis Cluster has it: what is
/// between its first `{` and the `}` after it if that is not empty, else
/// the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|b| *b == b'{') {
        let rest = &key[open + 1..];
        if let Some(len) = rest.iter().position(|b| *b == b'}') {
            if len > 0 {
                return &rest[..len];
            }
        }
    }
    key
}

/// FNV-1a: the shard of a key, the same in every clerk and kvd.
pub fn shard_of(key: &[u8], shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(shards.max(1))) as u32
}

/// The paths of service `svc`.
#[derive(Debug, Clone)]
pub struct Layout {
    root: String,
}

impl Layout {
    pub fn new(svc: &str) -> Result<Layout> {
        validate_service(svc)?;
        Ok(Layout {
            root: format!("/kv/{svc}"),
        })
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// The service's name.
    pub fn service(&self) -> &str {
        self.root.trim_start_matches("/kv/")
    }

    pub fn config(&self) -> String {
        format!("{}/config", self.root)
    }

    pub fn groups(&self) -> String {
        format!("{}/groups", self.root)
    }

    /// Group `g`'s election directory.
    pub fn group(&self, g: u32) -> String {
        format!("{}/groups/{g}", self.root)
    }

    /// Group `g`'s leader symlink (its target: the leader's address).
    pub fn leader(&self, g: u32) -> String {
        format!("{}/leader", self.group(g))
    }

    /// Group `g`'s members: an ephemeral file per live kvd of the group.
    pub fn members(&self, g: u32) -> String {
        format!("{}/members", self.group(g))
    }

    /// The config epoch group `g`'s leader last applied.
    pub fn applied(&self, g: u32) -> String {
        format!("{}/applied", self.group(g))
    }

    /// The service's password: what every client connection to its kvds
    /// and its Redis front end must give (`AUTH`). Realm members read it.
    pub fn password(&self) -> String {
        format!("{}/password", self.root)
    }

    /// The service's policy (JSON [`Policy`]).
    pub fn policy(&self) -> String {
        format!("{}/policy", self.root)
    }

    /// Group `g`'s log: an entry per write batch of its leader, each with
    /// the ops of every shard the batch touched ([`crate::shard`]).
    pub fn group_log(&self, g: u32) -> String {
        format!("{}/log", self.group(g))
    }

    pub fn group_log_entry(&self, g: u32, seq: u64) -> String {
        format!("{}/{seq:020}", self.group_log(g))
    }

    /// Group `g`'s log epoch: raised by each leader of the group as it
    /// begins (and by a mover whose shard's old group had no leader), so
    /// that an earlier leader's appends are refused.
    pub fn group_epoch(&self, g: u32) -> String {
        format!("{}/log-epoch", self.group(g))
    }

    /// Group `g`'s load report (JSON [`crate::kvd::Load`]).
    pub fn load(&self, g: u32) -> String {
        format!("{}/load", self.group(g))
    }

    /// Shard `s`'s directory: what a fence on the shard covers.
    pub fn shard(&self, s: u32) -> String {
        format!("{}/shard/{s}", self.root)
    }

    pub fn shard_epoch(&self, s: u32) -> String {
        format!("{}/epoch", self.shard(s))
    }

    pub fn snap(&self, s: u32) -> String {
        format!("{}/snap", self.shard(s))
    }

    /// Shard `s`'s own log, kept before the group logs (read and removed
    /// when the shard is next taken).
    pub fn log(&self, s: u32) -> String {
        format!("{}/log", self.shard(s))
    }

    /// The fs directory of the service's snapshots.
    pub fn snap_dir(&self) -> String {
        self.root.clone()
    }

    /// Shard `s`'s snapshot file up to entry `seq` of group `g`'s log, in
    /// tabos fs.
    pub fn snap_file(&self, s: u32, g: u32, seq: u64) -> String {
        format!("{}/s{s}.g{g}.{seq:020}", self.root)
    }

    /// Where a mover writes a shard's snapshot before renaming it into
    /// place (fs).
    pub fn snap_tmp(&self, s: u32, epoch: i64) -> String {
        format!("{}/tmp.s{s}.e{epoch}", self.root)
    }

    /// The balancer's election directory.
    pub fn balancer(&self) -> String {
        format!("{}/balancer", self.root)
    }
}

/// Reads service `svc`'s config and its version; a clear error if there
/// is no such service.
pub async fn read(
    client: &tabos_client::Client,
    realm: &str,
    layout: &Layout,
) -> Result<(Config, i64)> {
    match client.clone().name_get(realm, &layout.config()).await {
        Ok(e) => Ok((Config::from_json(&e.data)?, e.version)),
        Err(e) if e.code() == Some(tonic::Code::NotFound) => Err(Error::NotFound(format!(
            "there is no key-value service {} in realm {realm}",
            layout.service()
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Reads service `svc`'s password.
pub async fn read_password(
    client: &tabos_client::Client,
    realm: &str,
    layout: &Layout,
) -> Result<String> {
    let e = client.clone().name_get(realm, &layout.password()).await?;
    String::from_utf8(e.data).map_err(|_| Error::Corrupt("the service's password".into()))
}

/// Bytes of randomness in a new service's password.
pub const PASSWORD_BYTES: usize = 32;

/// A new password: [`PASSWORD_BYTES`] from the kernel's random source, in
/// hex.
pub fn new_password() -> Result<String> {
    let b: [u8; PASSWORD_BYTES] = random("a password")?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// `N` bytes from /dev/urandom, for `what`.
pub(crate) fn random<const N: usize>(what: &str) -> Result<[u8; N]> {
    use std::io::Read;
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::Invalid(format!("no randomness for {what}: {e}")))?;
    Ok(b)
}

/// A service name: 1..=64 bytes of letters, digits, '-' and '_'.
pub fn validate_service(svc: &str) -> Result<()> {
    tabos_client::app::check_name("service", svc, SERVICE_BYTES_MAX).map_err(Error::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_maps_round_robin() {
        let c = Config::initial(8, 3).unwrap();
        assert_eq!(c.shards, [0, 1, 2, 0, 1, 2, 0, 1]);
        assert!(Config::initial(0, 1).is_err());
        assert!(Config::initial(2, 3).is_err());
        assert_eq!(Config::from_json(&c.to_json()).unwrap(), c);
        assert!(Config::from_json(b"{\"epoch\":1,\"shards\":[5],\"groups\":[0]}").is_err());
    }

    #[test]
    fn rebalancing_moves_few_shards() {
        let c = Config::initial(16, 1).unwrap();
        let two = c.rebalanced(&[0, 1]).unwrap();
        assert_eq!(two.epoch, 2);
        assert_eq!(two.shards_of(0).len(), 8);
        assert_eq!(two.shards_of(1).len(), 8);
        let three = two.rebalanced(&[0, 1, 2]).unwrap();
        let moved = |a: &Config, b: &Config| {
            a.shards
                .iter()
                .zip(&b.shards)
                .filter(|(x, y)| x != y)
                .count()
        };
        // 16 over 3: 6, 5, 5; only what group 2 needs moves.
        assert_eq!(moved(&two, &three), 5);
        let back = three.rebalanced(&[0, 1]).unwrap();
        assert_eq!(moved(&three, &back), 5, "only group 2's shards move");
        assert!(back.shards.iter().all(|g| *g < 2));
    }

    #[test]
    fn keys_spread_over_shards() {
        let mut seen = [0u32; 8];
        for i in 0..8_000 {
            seen[shard_of(format!("key:{i}").as_bytes(), 8) as usize] += 1;
        }
        assert!(seen.iter().all(|n| *n > 800), "{seen:?}");
        // Hash tags, as Redis Cluster's.
        assert_eq!(hash_tag(b"{user1}:a"), b"user1");
        assert_eq!(hash_tag(b"a{}b{c}"), b"a{}b{c}");
        assert_eq!(hash_tag(b"a{b"), b"a{b");
        let c = Config::initial(64, 2).unwrap();
        assert_eq!(c.shard_of(b"x{t}"), c.shard_of(b"y{t}"));
        let old = Config::from_json(br#"{"epoch":1,"shards":[0,0,0,0],"groups":[0]}"#).unwrap();
        assert!(!old.hash_tags, "a service made before keeps its placement");
        assert_eq!(old.shard_of(b"x{t}"), shard_of(b"x{t}", 4));
        assert!(c.rebalanced(&[0, 1]).unwrap().hash_tags);
        assert!(validate_service("a/b").is_err());
        assert!(validate_service("main").is_ok());
    }
}
