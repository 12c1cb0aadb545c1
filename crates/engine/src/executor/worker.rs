//! The worker: claims runs through leases into a bounded number of slots, and hands each
//! to a driver; runs started or woken here take a slot at once when one is free.

use super::*;

/// A run claimed outside the worker's looks, handed to it with what is known of its mailbox
/// and its let-go switch.
pub(super) type Adopted = (
    Claimed,
    Option<KnownMail>,
    (watch::Sender<bool>, watch::Receiver<bool>),
);

/// A slot reserved for a run about to be claimed outside the worker's looks; given back
/// unless the run is handed over.
pub(super) struct EagerSlot {
    engine: Arc<Engine>,
    to_worker: Option<mpsc::UnboundedSender<Adopted>>,
}

impl EagerSlot {
    /// Runs `write` (given the store, this process's owner id and the lease's length in ms),
    /// which takes a run under this process's lease, and hands the run it took to the
    /// worker with what is known of its mailbox; returns what else the write gave. The write
    /// runs in a task of its own: once a run is taken here it is handed over, even if the
    /// caller goes away meanwhile. A write that took nothing gives the slot back.
    pub(super) async fn take_run<T, F, Fut>(self, write: F) -> Result<Option<T>, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(Arc<dyn RunStore>, String, i64) -> Fut,
        Fut: Future<Output = Result<Option<(Claimed, KnownMail, T)>, StoreError>> + Send + 'static,
    {
        let e = &self.engine;
        let written = write(e.store.clone(), e.config.owner.clone(), e.lease_ttl_ms());
        let task = tokio::spawn(async move {
            let Some((claimed, mail, out)) = written.await? else {
                return Ok(None);
            };
            self.hand_over(claimed, mail);
            Ok(Some(out))
        });
        task.await
            .map_err(|e| StoreError::backend_because("the write was interrupted", e))?
    }

    /// Hands a claimed run to the worker, which drives it in this slot. A worker that has
    /// stopped meanwhile gets nothing: the lease is let go.
    pub(super) fn hand_over(mut self, claimed: Claimed, mail: KnownMail) {
        let Some(to_worker) = self.to_worker.take() else {
            return;
        };
        let id = claimed.run.id.clone();
        let lost = self.engine.activate(&id);
        let switch = lost.0.clone();
        if let Err(mpsc::error::SendError((claimed, ..))) =
            to_worker.send((claimed, Some(mail), lost))
        {
            self.engine.deactivate(&id, &switch);
            self.engine.release_slots(1);
            self.engine.wake.notify_one();
            let store = self.engine.store.clone();
            tokio::spawn(async move {
                let _ = store.release_lease(&claimed.lease).await;
            });
        }
    }
}

impl Drop for EagerSlot {
    fn drop(&mut self) {
        if self.to_worker.is_some() {
            self.engine.release_slots(1);
            // A look that found no slot while this one was held waits for a run to end
            // here, which may never come: it looks again now.
            self.engine.wake.notify_one();
        }
    }
}

impl Engine {
    /// Drives runs until `shutdown` turns true, then drains: claims nothing more, lets each
    /// step in flight finish within [`EngineConfig::shutdown_grace`] (its run is let go at
    /// the step boundary), cuts off what is still running after that, and lets go of every
    /// lease this owner holds, so another process carries on at once instead of after lease
    /// expiry. Frees this owner's leases from an earlier incarnation first, so a restarted
    /// process carries on with its runs at once.
    pub async fn run_worker(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) -> WorkerStopped {
        match self.store.release_owner(&self.config.owner).await {
            Ok(n) if n > 0 => {
                info!(owner = %self.config.owner, runs = n, "took back runs after restart")
            }
            Ok(_) => {}
            Err(e) => warn!(error = %ErrorChain(&e), "could not release stale leases"),
        }
        let mut tasks = tokio::task::JoinSet::new();
        let (to_worker, mut adopted) = mpsc::unbounded_channel::<Adopted>();
        // Runs are handed over once the first look is done (it takes what was left waiting).
        let mut to_worker = Some(to_worker);
        // A look that had no free slot for all it may have found: done when a run ending here
        // frees one. (A run that parks or ends makes no new work; starts wake the worker
        // themselves, deliveries too, or, to a run driven here, when its driver lets go; the
        // timer finds the rest.)
        let mut owed: Option<Look> = None;
        let mut look = Some(Look::Everything);
        // Kept across wakes: a worker woken more often than this still looks for runs whose
        // holder died.
        let mut next_poll = tokio::time::Instant::now() + self.config.poll_interval;
        loop {
            if *shutdown.borrow() {
                break;
            }
            while tasks.try_join_next().is_some() {}
            if let Some(kind) = look {
                let left = self.look_for_runs(kind, &mut tasks).await;
                self.backlog.store(left.is_some(), Ordering::SeqCst);
                owed = match (owed, left) {
                    (o, Some(l)) => Some(o.map_or(l, |o| o.and(l))),
                    (Some(o), None) if !kind.covers(o) => Some(o),
                    _ => None,
                };
            }
            if let Some(to_worker) = to_worker.take() {
                *self.lock_adopt() = Some(to_worker);
            }
            look = tokio::select! {
                _ = self.wake.notified() => Some(Look::Free),
                // Other processes' new work reaches this one by notice while the relay is
                // live; only runs whose holder died are found by looking.
                _ = tokio::time::sleep_until(next_poll) => {
                    next_poll = tokio::time::Instant::now() + self.config.poll_interval;
                    Some(if self.relay_live() {
                        Look::Expired
                    } else {
                        Look::Everything
                    })
                }
                _ = shutdown.changed() => None,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => owed.take(),
                Some((claimed, mail, lost)) = adopted.recv() => {
                    self.spawn_driver(&mut tasks, claimed, mail, lost);
                    None
                }
            };
        }
        // No more runs are handed over; those already are driven (and let go at once).
        self.lock_adopt().take();
        adopted.close();
        while let Some((claimed, mail, lost)) = adopted.recv().await {
            self.spawn_driver(&mut tasks, claimed, mail, lost);
        }
        self.draining.send_replace(true);
        let in_flight = tasks.len();
        let drained = tokio::time::timeout(self.config.shutdown_grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await
        .is_ok();
        if !drained {
            warn!(
                runs = tasks.len(),
                grace_secs = self.config.shutdown_grace.as_secs_f64(),
                "steps still running after the shutdown grace; cutting them off"
            );
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        // Whatever is still leased here (steps cut off) goes now; the fence moves, so a
        // write from a step that was cut off could not land anyway.
        let cut_off = match self.store.release_owner(&self.config.owner).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %ErrorChain(&e), "could not let go of leases at shutdown");
                0
            }
        };
        info!(in_flight, cut_off, "worker stopped; runs let go");
        WorkerStopped { in_flight, cut_off }
    }

    /// Claims runs for the free slots, as many as one statement gives, and drives each.
    /// Returns the part of the look left undone when the slots ran out (runs may be left).
    async fn look_for_runs(
        self: &Arc<Self>,
        kind: Look,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> Option<Look> {
        let passes: &[bool] = match kind {
            Look::Free => &[false],
            Look::Expired => &[true],
            Look::Everything => &[false, true],
        };
        for &expired in passes {
            // From this pass on.
            let rest = if expired { Look::Expired } else { kind };
            // Each round takes at least one run or ends the pass.
            loop {
                let free = self.reserve_slots(self.config.max_concurrent_runs);
                if free == 0 {
                    return Some(rest);
                }
                let mut exclude: Vec<String> = self.pass_over_active(!expired);
                exclude.extend(self.lock_newer().iter().cloned());
                let claimed = match self
                    .store
                    .claim_runs(
                        &self.config.owner,
                        self.lease_ttl_ms(),
                        &exclude,
                        &self.workflow_names,
                        free,
                        expired,
                    )
                    .await
                {
                    Ok(claimed) => claimed,
                    Err(e) => {
                        self.release_slots(free);
                        warn!(error = %ErrorChain(&e), "claim failed");
                        return None;
                    }
                };
                let (taken, more) = (claimed.runs.len(), claimed.more);
                self.release_slots(free - taken);
                for claimed in claimed.runs {
                    let lost = self.activate(&claimed.run.id);
                    self.spawn_driver(tasks, claimed, None, lost);
                }
                if !more || taken == 0 {
                    break;
                }
                // The slots filled with runs left to take: the rest of the look comes when a
                // run ends here. Fewer than asked with some left (a store takes so many at a
                // time): another round.
                if taken == free {
                    return Some(rest);
                }
            }
        }
        None
    }

    /// Whether a worker runs here and takes runs: it has made its first look for runs left
    /// waiting, and is not shutting down.
    pub fn is_taking_runs(&self) -> bool {
        self.lock_adopt().is_some()
    }

    /// How many runs this process drives right now (steps running or about to).
    pub fn runs_driven_here(&self) -> usize {
        self.lock_active().len()
    }

    /// Whether this process is shutting down (drivers let go at their next step boundary).
    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    pub(super) fn lock_active(&self) -> std::sync::MutexGuard<'_, HashMap<String, Driving>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a run this process is about to drive; the switch turns when it must let go.
    pub(super) fn activate(&self, run_id: &str) -> (watch::Sender<bool>, watch::Receiver<bool>) {
        let (lost_tx, lost_rx) = watch::channel(false);
        self.lock_active().insert(
            run_id.to_string(),
            Driving {
                lost: lost_tx.clone(),
                passed_over: false,
                ended: false,
            },
        );
        (lost_tx, lost_rx)
    }

    /// The driver of `run_id` let go. If a look for free runs passed over it meanwhile (the
    /// run parked and was woken by a delivery before its driver was done, say), the worker
    /// looks again: nothing else would tell it the run is free. A run that ended here is
    /// never free again: no look.
    /// Only the entry `lost` (the driver's switch) belongs to is removed: a driver still
    /// letting go of a run parked again leaves alone the entry of the one that took it up.
    pub(super) fn deactivate(&self, run_id: &str, lost: &watch::Sender<bool>) {
        let look_again = {
            let mut active = self.lock_active();
            match active.get(run_id) {
                Some(d) if d.lost.same_channel(lost) => active
                    .remove(run_id)
                    .is_some_and(|d| d.passed_over && !d.ended),
                _ => false,
            }
        };
        if look_again {
            self.wake.notify_one();
        }
    }

    /// Tells the worker that a delivery may have made run `run_id` free to claim. A run driven
    /// here is not free until its driver lets go, so a look now would find nothing: it is
    /// marked for a look then instead.
    pub(super) fn delivered(&self, run_id: &str) {
        if let Some(d) = self.lock_active().get_mut(run_id) {
            d.passed_over = true;
            return;
        }
        self.wake.notify_one();
    }

    /// Drives a claimed run in a slot already taken for it; the slot is given back when its
    /// driver lets go.
    fn spawn_driver(
        self: &Arc<Self>,
        tasks: &mut tokio::task::JoinSet<()>,
        Claimed {
            run,
            lease,
            pending,
        }: Claimed,
        mail: Option<KnownMail>,
        lost: (watch::Sender<bool>, watch::Receiver<bool>),
    ) {
        let done = DriverDone {
            engine: self.clone(),
            run_id: lease.run_id.clone(),
            lost: lost.0.clone(),
        };
        let me = self.clone();
        tasks.spawn(async move {
            let _done = done;
            me.drive(run, lease, pending, mail, lost).await;
        });
    }

    /// Takes up to `wanted` of the free slots; returns how many it took.
    fn reserve_slots(&self, wanted: usize) -> usize {
        let max = self.config.max_concurrent_runs;
        let mut took = 0;
        let _ = self
            .slots_taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                took = wanted.min(max.saturating_sub(taken));
                Some(taken + took)
            });
        took
    }

    /// Gives back `n` slots taken with [`Engine::reserve_slots`].
    pub(super) fn release_slots(&self, n: usize) {
        let _ = self
            .slots_taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                debug_assert!(taken >= n, "{n} slots given back of {taken} taken");
                Some(taken.saturating_sub(n))
            });
    }

    fn lock_adopt(&self) -> std::sync::MutexGuard<'_, Option<mpsc::UnboundedSender<Adopted>>> {
        self.adopt.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a run claimed outside the worker's looks, when a worker runs here (and is
    /// not draining) and has one free.
    pub(super) fn eager_slot(self: &Arc<Self>) -> Option<EagerSlot> {
        if self.backlog.load(Ordering::SeqCst) {
            return None;
        }
        let to_worker = self.lock_adopt().clone()?;
        // Built only once the slot is taken: dropping one gives a slot back.
        (self.reserve_slots(1) == 1).then(|| EagerSlot {
            engine: self.clone(),
            to_worker: Some(to_worker),
        })
    }

    pub(super) fn lock_not_chained(
        &self,
    ) -> std::sync::MutexGuard<'_, HashSet<(String, &'static str)>> {
        self.not_chained.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn lock_newer(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.newer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The runs a look must pass over (driven here); marked as passed over by a look for
    /// free runs (`free`), which could have claimed them were they not driven here.
    fn pass_over_active(&self, free: bool) -> Vec<String> {
        let mut active = self.lock_active();
        if free {
            active.values_mut().for_each(|d| d.passed_over = true);
        }
        active.keys().cloned().collect()
    }

    pub(super) fn lease_ttl_ms(&self) -> i64 {
        self.config.lease_ttl.as_millis() as i64
    }
}

/// A run this process drives.
pub(super) struct Driving {
    /// The switch that makes its driver let go at once.
    pub(super) lost: watch::Sender<bool>,
    /// A look for runs to claim left it out since it was claimed.
    pub(super) passed_over: bool,
    /// The run ended while driven here.
    pub(super) ended: bool,
}

/// What a worker looks for when it claims runs.
#[derive(Debug, Clone, Copy)]
enum Look {
    /// Runs nobody holds (one was started, sent mail, or let go).
    Free,
    /// Runs whose holder's lease ran out (it died or hangs).
    Expired,
    Everything,
}

impl Look {
    fn covers(self, other: Look) -> bool {
        matches!(
            (self, other),
            (Look::Everything, _) | (Look::Free, Look::Free) | (Look::Expired, Look::Expired)
        )
    }

    /// A look covering both.
    fn and(self, other: Look) -> Look {
        match (self, other) {
            (Look::Free, Look::Free) => Look::Free,
            (Look::Expired, Look::Expired) => Look::Expired,
            _ => Look::Everything,
        }
    }
}
