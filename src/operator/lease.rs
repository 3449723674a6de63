//! Leader election on a `coordination.k8s.io/v1` Lease, so that of the operator's
//! replicas exactly one reconciles: the Lease is created or taken over once its holder
//! has not renewed it for its duration, renewed every `renew` with a `resourceVersion`
//! precondition (two candidates can never both win a write), and handed back on
//! shutdown. Each holder change raises `leaseTransitions`: that number is the holder's
//! term, which the state locks it takes record (see `state/lock.rs`).
//!
//! A holder's expiry is judged by this process's own clock, from when it last saw the
//! Lease change, never from the `renewTime` another machine wrote: clocks of two nodes
//! may disagree, and a candidate trusting a fast clock would take over from a holder
//! that still renews.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::state::LeaseHold;

/// How the Lease is held.
#[derive(Debug, Clone)]
pub struct Settings {
    pub namespace: String,
    pub name: String,
    /// This process: the pod's name and a random suffix, so that a restarted container
    /// of the same pod is a new holder.
    pub identity: String,
    /// How long a holder that stopped renewing keeps the Lease.
    pub duration: Duration,
}

impl Settings {
    /// How often the holder renews: a third of the duration, so two renewals can fail
    /// before the holder steps down.
    pub fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// How long the holder goes on without a successful renewal before it stops: one
    /// renewal short of the duration, so it has stopped before anyone may take over.
    pub fn renew_deadline(&self) -> Duration {
        self.duration.saturating_sub(self.renew_every())
    }

    /// How often a candidate looks at the Lease: an eighth of a renewal (a second at
    /// most), so it sees each renewal soon after it is written and takes over soon
    /// after the expiry. A dead holder's locks are then released within the duration
    /// and one renewal of its last renewal, with time to spare for the first plan.
    pub fn poll_every(&self) -> Duration {
        (self.renew_every() / 8).min(Duration::from_secs(1))
    }
}

/// What a candidate does, given the Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it, holding it at term 0.
    Create,
    /// This process holds it: renew it.
    Renew { term: i32 },
    /// Free (handed back, or its holder stopped renewing): take it at `term`.
    TakeOver { term: i32 },
    /// Someone else holds it and renews it.
    Wait { holder: String },
}

/// The Lease's fields that the decision reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    pub holder: Option<String>,
    pub transitions: i32,
    pub version: String,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            transitions: spec.lease_transitions.unwrap_or(0),
            version: lease.metadata.resource_version.clone().unwrap_or_default(),
        }
    }
}

/// The decision: `record` as read now, `unchanged_for` how long it has been the same
/// (by this process's clock, since it first saw this version).
pub fn decide(
    record: Option<&Record>,
    identity: &str,
    unchanged_for: Duration,
    duration: Duration,
) -> Step {
    let Some(r) = record else {
        return Step::Create;
    };
    match &r.holder {
        Some(h) if h == identity => Step::Renew {
            term: r.transitions,
        },
        Some(h) if unchanged_for < duration => Step::Wait { holder: h.clone() },
        _ => Step::TakeOver {
            term: r.transitions + 1,
        },
    }
}

/// Where a candidate stands after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Leading { term: i32 },
    Following { holder: Option<String> },
}

/// A candidate for the Lease.
pub struct Elector {
    api: Api<Lease>,
    pub settings: Settings,
    /// The version last seen and when it was first seen.
    seen: Option<(String, Instant)>,
}

impl Elector {
    pub fn new(client: kube::Client, settings: Settings) -> Elector {
        Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            seen: None,
        }
    }

    /// The state lock's record of holding the Lease at `term`.
    pub fn hold(&self, term: i32) -> LeaseHold {
        LeaseHold {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            holder: self.settings.identity.clone(),
            term,
        }
    }

    /// One read of the Lease and the write it calls for. A write refused because the
    /// Lease changed since it was read (409) is not an error: someone else moved first.
    pub async fn attempt(&mut self) -> Result<Standing, kube::Error> {
        let lease = self.api.get_opt(&self.settings.name).await?;
        let record = lease.as_ref().map(Record::of);
        let unchanged_for = match (&record, &self.seen) {
            (Some(r), Some((v, since))) if *v == r.version => since.elapsed(),
            (Some(r), _) => {
                self.seen = Some((r.version.clone(), Instant::now()));
                Duration::ZERO
            }
            (None, _) => Duration::ZERO,
        };
        let step = decide(
            record.as_ref(),
            &self.settings.identity,
            unchanged_for,
            self.settings.duration,
        );
        let (term, written) = match step {
            Step::Wait { holder } => {
                return Ok(Standing::Following {
                    holder: Some(holder),
                })
            }
            Step::Create => (0, self.create().await),
            Step::Renew { term } => (term, self.write(lease, term, false).await),
            Step::TakeOver { term } => (term, self.write(lease, term, true).await),
        };
        match written {
            Ok(()) => Ok(Standing::Leading { term }),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Standing::Following {
                holder: record.and_then(|r| r.holder),
            }),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, term: i32, acquired: bool) -> serde_json::Value {
        let now = now();
        let mut spec = json!({
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": self.settings.duration.as_secs().max(1),
            "renewTime": now,
            "leaseTransitions": term,
        });
        if acquired {
            spec["acquireTime"] = json!(now);
        }
        spec
    }

    async fn create(&self) -> Result<(), kube::Error> {
        let lease: Lease = serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
            "spec": self.spec(0, true),
        }))
        .map_err(kube::Error::SerdeError)?;
        self.api.create(&PostParams::default(), &lease).await?;
        Ok(())
    }

    /// Writes the Lease read as `lease` (its `resourceVersion` the precondition) held
    /// by this process at `term`.
    async fn write(
        &self,
        lease: Option<Lease>,
        term: i32,
        acquired: bool,
    ) -> Result<(), kube::Error> {
        let Some(mut lease) = lease else {
            return self.create().await;
        };
        let mut spec = serde_json::to_value(lease.spec.take().unwrap_or_default())
            .map_err(kube::Error::SerdeError)?;
        if let (Some(into), Some(from)) =
            (spec.as_object_mut(), self.spec(term, acquired).as_object())
        {
            into.extend(from.clone());
        }
        lease.spec = Some(serde_json::from_value(spec).map_err(kube::Error::SerdeError)?);
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    /// Hands the Lease back if this process holds it, so a candidate takes over at
    /// once rather than after the duration. Called only once nothing runs any more.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        lease.spec = Some(spec);
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    /// Waits until this process holds the Lease, calling `waiting` with why not
    /// (`held by …`) whenever that changes; returns the term.
    pub async fn acquire(&mut self, mut waiting: impl FnMut(&str)) -> i32 {
        let mut last = String::new();
        loop {
            let why = match self.attempt().await {
                Ok(Standing::Leading { term }) => return term,
                Ok(Standing::Following { holder: Some(h) }) => format!("held by {h}"),
                Ok(Standing::Following { holder: None }) => "taken by another replica".into(),
                Err(e) => format!("it cannot be read: {e}"),
            };
            if why != last {
                waiting(&why);
                last = why;
            }
            tokio::time::sleep(self.settings.poll_every()).await;
        }
    }

    /// Renews the Lease every [`Settings::renew_every`] until it is lost: someone else
    /// holds it, or no renewal succeeded within [`Settings::renew_deadline`]. Returns
    /// why.
    pub async fn keep(&mut self, term: i32) -> String {
        let mut renewed = Instant::now();
        loop {
            tokio::time::sleep(self.settings.renew_every()).await;
            match self.attempt().await {
                Ok(Standing::Leading { term: t }) if t == term => renewed = Instant::now(),
                Ok(Standing::Leading { term: t }) => {
                    return format!(
                        "the Lease moved to term {t} while this process held term {term}"
                    )
                }
                Ok(Standing::Following { holder: Some(h) }) if h != self.settings.identity => {
                    return format!("the Lease is held by {h}")
                }
                Ok(Standing::Following { .. }) => {}
                Err(e) => crate::output::operator::log(
                    "warn",
                    "",
                    &format!(
                        "renew the Lease {}/{}: {e}",
                        self.settings.namespace, self.settings.name
                    ),
                ),
            }
            if renewed.elapsed() >= self.settings.renew_deadline() {
                return format!(
                    "the Lease was not renewed for {}s",
                    renewed.elapsed().as_secs()
                );
            }
        }
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(by: &str, transitions: i32) -> Record {
        Record {
            holder: Some(by.into()),
            transitions,
            version: "7".into(),
        }
    }

    const D: Duration = Duration::from_secs(15);

    #[test]
    fn no_lease_is_created_at_term_zero() {
        assert_eq!(decide(None, "a", Duration::ZERO, D), Step::Create);
    }

    #[test]
    fn the_holder_renews_at_its_term_whatever_the_time() {
        assert_eq!(
            decide(Some(&held("a", 3)), "a", Duration::from_secs(60), D),
            Step::Renew { term: 3 }
        );
    }

    #[test]
    fn a_lease_someone_renews_is_waited_for_until_unchanged_for_its_duration() {
        let r = held("b", 3);
        assert_eq!(
            decide(Some(&r), "a", Duration::from_secs(14), D),
            Step::Wait { holder: "b".into() }
        );
        assert_eq!(decide(Some(&r), "a", D, D), Step::TakeOver { term: 4 });
    }

    #[test]
    fn a_lease_handed_back_is_taken_at_once_at_the_next_term() {
        let r = Record {
            holder: None,
            transitions: 3,
            version: "9".into(),
        };
        assert_eq!(
            decide(Some(&r), "a", Duration::ZERO, D),
            Step::TakeOver { term: 4 }
        );
    }

    #[test]
    fn the_holder_stops_one_renewal_before_anyone_may_take_over() {
        let s = Settings {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "a".into(),
            duration: D,
        };
        assert_eq!(s.renew_every(), Duration::from_secs(5));
        assert_eq!(s.renew_deadline(), Duration::from_secs(10));
        assert!(s.renew_deadline() + s.renew_every() <= s.duration);
        assert_eq!(s.poll_every(), Duration::from_millis(625));
        let short = Settings {
            duration: Duration::from_secs(6),
            ..s
        };
        assert_eq!(short.renew_every(), Duration::from_secs(2));
        assert_eq!(short.poll_every(), Duration::from_millis(250));
    }
}
