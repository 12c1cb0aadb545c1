//! Per-run wakeups. A reader of one run waits on that run's signal only, so a commit wakes
//! the readers of its run and nobody else: 10,000 idle streams cost nothing while one run
//! moves. A signal exists while someone watches its run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::store::StoredEvent;

/// What a step commit made in this process tells its run's readers, so that they need not
/// read it back from the store: the events it stored (none: the stream did not move).
#[derive(Debug)]
pub(crate) struct News {
    pub(crate) events: Vec<StoredEvent>,
    /// The write also changed the run's record beyond its stream: a step's commit that set
    /// the state or ended the run.
    pub(crate) record_changed: bool,
}

impl News {
    /// The news of `events` just stored under the sequence numbers `seqs`, pairwise.
    pub(crate) fn stored<'a>(
        events: impl IntoIterator<Item = &'a crate::Envelope>,
        seqs: impl IntoIterator<Item = i64>,
    ) -> News {
        // The clock here, not the database's: readers are not shown `created_at`.
        let created_at = crate::store::now_ms();
        News {
            events: events
                .into_iter()
                .zip(seqs)
                .map(|(envelope, seq)| StoredEvent {
                    seq,
                    envelope: envelope.clone(),
                    created_at,
                })
                .collect(),
            record_changed: false,
        }
    }
}

/// What a watcher learns when it looks ([`RunWatch::look`]).
pub(crate) enum Look {
    Unchanged,
    /// Only the run's record changed (it parked, ended or was let go): the stream is where
    /// this process's news left it, so a reader that took that news is in step.
    Touched,
    /// Exactly one commit here moved the stream, with its news; `touched` says whether the
    /// record changed besides.
    News {
        news: Arc<News>,
        touched: bool,
    },
    Changed,
}

/// A run's signal. `count` is bumped on every change, `stream` on each that may have moved
/// the stream; `news` is that of the last stream change when a step commit here made it (None
/// when it came from elsewhere).
#[derive(Clone, Default)]
struct Signal {
    count: u64,
    stream: u64,
    news: Option<Arc<News>>,
}

/// The signals of the runs someone is watching in this process.
#[derive(Default)]
pub(crate) struct Signals {
    runs: Mutex<HashMap<String, watch::Sender<Signal>>>,
    /// Bumped to wake every watcher at once (notices may have been missed).
    all: watch::Sender<u64>,
}

impl Signals {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<Signal>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the watchers of `run_id`, if any: they look at the store.
    pub(crate) fn raise(&self, run_id: &str) {
        if let Some(tx) = self.lock().get(run_id) {
            tx.send_modify(|s| {
                s.count = s.count.wrapping_add(1);
                s.stream = s.stream.wrapping_add(1);
                s.news = None;
            });
        }
    }

    /// Wakes the watchers of `run_id`, if any, for a change of its record alone, its stream
    /// ending where this process's news of it ends (a driver here that told every event it
    /// stored let go, or a look found only that): a reader of the stream keeps the news it
    /// has not looked at yet, where [`Signals::raise`] would send it to the store.
    pub(crate) fn touch(&self, run_id: &str) {
        if let Some(tx) = self.lock().get(run_id) {
            tx.send_modify(|s| s.count = s.count.wrapping_add(1));
        }
    }

    /// Wakes the watchers of `run_id`, if any, with a step commit's news; `news` is made
    /// only when someone watches. Called in commit order (by the run's one driver).
    pub(crate) fn publish(&self, run_id: &str, news: impl FnOnce() -> News) {
        if let Some(tx) = self.lock().get(run_id) {
            let news = Arc::new(news());
            tx.send_modify(|s| {
                s.count = s.count.wrapping_add(1);
                s.stream = s.stream.wrapping_add(1);
                s.news = Some(news);
            });
        }
    }

    /// Whether the last change to `run_id`'s stream was news published here that reaches
    /// `head` (the stream's next sequence number as a notice or a look tells it): then the
    /// stream did not move past what its readers were told, though the notice may come
    /// after the news (an echo of the commit, or a look read before it landed).
    pub(crate) fn has_news_up_to(&self, run_id: &str, head: i64) -> bool {
        self.lock().get(run_id).is_some_and(|tx| {
            tx.borrow()
                .news
                .as_ref()
                .and_then(|n| n.events.last())
                .is_some_and(|last| last.seq + 1 >= head)
        })
    }

    /// Wakes every watcher: for when news may have been lost (a change feed reconnected).
    pub(crate) fn raise_all(&self) {
        self.all.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether any run is watched now (a fallback poller looks for changes only then).
    pub(crate) fn any_watched(&self) -> bool {
        !self.lock().is_empty()
    }

    /// How many runs are watched now.
    #[cfg(test)]
    fn watched_count(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn watch(self: &Arc<Self>, run_id: &str) -> RunWatch {
        let run = {
            let mut runs = self.lock();
            runs.entry(run_id.to_string())
                .or_insert_with(|| watch::channel(Signal::default()).0)
                .subscribe()
        };
        let (seen, seen_stream) = {
            let s = run.borrow();
            (s.count, s.stream)
        };
        let all = self.all.subscribe();
        let seen_all = *all.borrow();
        RunWatch {
            signals: self.clone(),
            run_id: run_id.to_string(),
            run,
            seen,
            seen_stream,
            seen_all,
            all,
        }
    }
}

/// A watcher of one run ([`crate::Engine::watch`]). Dropping the last watcher of a run
/// forgets its signal.
pub struct RunWatch {
    signals: Arc<Signals>,
    run_id: String,
    run: watch::Receiver<Signal>,
    /// The run's signal counts (all changes, stream changes) when last looked at.
    seen: u64,
    seen_stream: u64,
    /// The everyone signal's count when last looked at. Counted, not asked of the channel:
    /// [`RunWatch::changed`] returning for it marks it seen there, and the look after must
    /// still know that everyone was asked to look.
    seen_all: u64,
    all: watch::Receiver<u64>,
}

impl RunWatch {
    /// Marks everything raised so far as seen: call before looking at the run, so a change
    /// made after the look wakes [`RunWatch::changed`].
    pub fn mark_seen(&mut self) {
        self.look();
    }

    /// [`RunWatch::mark_seen`], saying what changed since the last look: nothing; the
    /// record alone, by a driver here; exactly one commit in this process, with its news; or
    /// anything else (more, news from elsewhere, everyone woken), which the store tells.
    pub(crate) fn look(&mut self) -> Look {
        let all = *self.all.borrow_and_update();
        let everyone = all != self.seen_all;
        self.seen_all = all;
        let Signal {
            count,
            stream,
            news,
        } = self.run.borrow_and_update().clone();
        let changes = count.wrapping_sub(self.seen);
        let stream_changes = stream.wrapping_sub(self.seen_stream);
        self.seen = count;
        self.seen_stream = stream;
        match (changes, stream_changes, news) {
            _ if everyone => Look::Changed,
            (0, ..) => Look::Unchanged,
            (_, 0, _) => Look::Touched,
            (c, 1, Some(news)) => Look::News {
                news,
                touched: c > 1,
            },
            _ => Look::Changed,
        }
    }

    /// [`RunWatch::mark_seen`], saying whether the run's record may have changed since the
    /// last look beyond its stream (its status, state or result): false only when all that
    /// happened is one write made here that only appended to the stream (a journaled call's
    /// events, a live append, or a step's commit that kept the state and did not end the
    /// run).
    pub fn record_may_have_changed(&mut self) -> bool {
        match self.look() {
            Look::Unchanged => false,
            Look::News { news, touched } => touched || news.record_changed,
            Look::Touched | Look::Changed => true,
        }
    }

    /// Waits until the run's signal (or the everyone signal) is raised after the last
    /// [`RunWatch::mark_seen`]. Cancel-safe.
    pub async fn changed(&mut self) {
        tokio::select! {
            r = self.run.changed() => { let _ = r; }
            r = self.all.changed() => { let _ = r; }
        }
    }
}

impl Drop for RunWatch {
    fn drop(&mut self) {
        let mut runs = self.signals.lock();
        // This watcher's receiver still counts until the end of this function.
        if runs
            .get(&self.run_id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            runs.remove(&self.run_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_watcher_wakes_for_its_own_run_only_and_forgets_when_dropped() {
        let signals = Arc::new(Signals::default());
        let mut a = signals.watch("a");
        let mut b = signals.watch("b");
        a.mark_seen();
        b.mark_seen();
        signals.raise("a");
        tokio::time::timeout(Duration::from_secs(5), a.changed())
            .await
            .expect("the watcher of a is woken");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), b.changed())
                .await
                .is_err(),
            "the watcher of b sleeps on while a moves"
        );
        signals.raise_all();
        tokio::time::timeout(Duration::from_secs(5), b.changed())
            .await
            .expect("everyone is woken by raise_all");
        assert!(
            matches!(b.look(), Look::Changed),
            "woken by raise_all, the watcher is told to look at the store"
        );
        let a2 = signals.watch("a");
        drop(a);
        assert_eq!(signals.watched_count(), 2, "a is still watched by a2");
        drop(a2);
        drop(b);
        assert!(!signals.any_watched());
    }

    #[tokio::test]
    async fn news_is_handed_over_only_when_it_is_the_one_change_since_the_last_look() {
        let signals = Arc::new(Signals::default());
        let mut w = signals.watch("a");
        let news = |seq| News {
            events: vec![StoredEvent {
                seq,
                envelope: crate::Envelope {
                    value: serde_json::json!({}),
                    qualified_name: None,
                    event_type: "E".into(),
                    types: None,
                },
                created_at: 0,
            }],
            record_changed: false,
        };
        assert!(matches!(w.look(), Look::Unchanged), "nothing happened yet");
        signals.publish("a", || news(0));
        match w.look() {
            Look::News { news: got, .. } => assert_eq!(got.events[0].seq, 0),
            _ => panic!("one commit: its news"),
        }
        assert!(matches!(w.look(), Look::Unchanged), "nothing since");
        signals.publish("a", || news(1));
        signals.publish("a", || news(2));
        assert!(
            matches!(w.look(), Look::Changed),
            "two commits: the reader looks at the store"
        );
        signals.raise("a");
        assert!(
            matches!(w.look(), Look::Changed),
            "a change from elsewhere says nothing"
        );
        signals.publish("a", || news(3));
        signals.raise_all();
        assert!(
            matches!(w.look(), Look::Changed),
            "everyone was asked to look"
        );
        // A driver here letting go after its commit changes the record, not the stream:
        // the news still holds, and says the record changed.
        signals.publish("a", || news(4));
        signals.touch("a");
        match w.look() {
            Look::News { news, touched } => {
                assert_eq!(news.events[0].seq, 4);
                assert!(touched, "the record changed besides");
            }
            _ => panic!("a commit then a touch: the commit's news"),
        }
        signals.touch("a");
        assert!(
            matches!(w.look(), Look::Touched),
            "the record alone changed"
        );
        assert!(
            signals.has_news_up_to("a", 5),
            "the echo of the last commit says nothing"
        );
        assert!(
            signals.has_news_up_to("a", 4),
            "nor a late one of an earlier commit"
        );
        assert!(!signals.has_news_up_to("a", 6), "a later change does");
        signals.raise("a");
        assert!(
            !signals.has_news_up_to("a", 5),
            "a change from elsewhere came after it"
        );
        assert!(matches!(w.look(), Look::Changed));
        // A new watcher has seen nothing yet: its reader reads the store first whatever the
        // signal says.
        let mut late = signals.watch("a");
        assert!(matches!(late.look(), Look::Unchanged));
    }
}
