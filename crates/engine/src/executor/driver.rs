//! A driver: runs a claimed run's steps one after another under its lease, quick steps
//! committed together, until the run ends, parks at a wait or the lease is lost.

use super::*;
use crate::context::StepEffects;
use crate::workflow::RetryPolicy;

/// How a driver stopped driving a run.
#[derive(Debug, Clone, Copy)]
struct LetGo {
    /// It still holds the lease, to be released (false when the lease is already gone).
    release: bool,
    /// Every change it made was told to this process's readers, as news or as a touch: they
    /// need not look at the store. Never so when it lost the lease: whoever took the run, or
    /// cancelled it, wrote what those readers have not heard.
    told: bool,
}

impl LetGo {
    /// The lease is gone (lost, or let go with the run's last commit), nothing more told.
    const GONE: LetGo = LetGo {
        release: false,
        told: false,
    };
    /// The lease is still held, to be released; readers look at the store for what changed.
    const UNTOLD: LetGo = LetGo {
        release: true,
        told: false,
    };
}

/// What a driver holds, given back when its task ends however it ends (a step that panics
/// unwinds through it): its entry among the runs driven here, and its slot.
pub(super) struct DriverDone {
    pub(super) engine: Arc<Engine>,
    pub(super) run_id: String,
    pub(super) lost: watch::Sender<bool>,
}

impl Drop for DriverDone {
    fn drop(&mut self) {
        self.engine.deactivate(&self.run_id, &self.lost);
        self.engine.release_slots(1);
    }
}

/// Aborts a task when dropped: a driver's heartbeat stops with it, even one that panics.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Engine {
    /// Drives one run in this process until it finishes, parks at a wait, or is found leased
    /// by another live process; returns its status then. For tools that own a single run,
    /// like the CLI: no other run is touched. Leases this owner held in an earlier
    /// incarnation are taken back first.
    pub async fn drive_run(self: &Arc<Self>, run_id: &str) -> Result<RunStatus, EngineError> {
        self.store.release_owner(&self.config.owner).await?;
        // Bounded: each pass either drives the run a step further or returns.
        for _ in 0..10_000 {
            match self
                .store
                .claim_run(run_id, &self.config.owner, self.lease_ttl_ms())
                .await?
            {
                Some((run, lease)) => {
                    let lost = self.activate(run_id);
                    let switch = lost.0.clone();
                    self.drive(run, lease, None, None, lost).await;
                    self.deactivate(run_id, &switch);
                    if self.lock_newer().contains(run_id) {
                        let run = self.store.get_run(run_id).await?;
                        let wf = run.as_ref().and_then(|r| self.workflows.get(&r.workflow));
                        return Err(EngineError::NewerFormat {
                            run: run_id.to_string(),
                            format: run.as_ref().map_or(0, |r| r.format),
                            supported: wf.map_or(0, |w| w.format()),
                        });
                    }
                }
                None => {
                    let run = self
                        .store
                        .get_run(run_id)
                        .await?
                        .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
                    return Ok(run.status);
                }
            }
        }
        let run = self.store.get_run(run_id).await?;
        Ok(run.map_or(RunStatus::Running, |r| r.status))
    }

    /// Drives one claimed run until it finishes, parks, or the lease is lost.
    pub(super) async fn drive(
        self: &Arc<Self>,
        run: RunRecord,
        lease: Lease,
        pending: Option<Vec<PendingEvent>>,
        mail: Option<KnownMail>,
        (lost_tx, lost_rx): (watch::Sender<bool>, watch::Receiver<bool>),
    ) {
        let Some(wf) = self.workflows.get(&run.workflow).cloned() else {
            // Another process may know this workflow; let it have the run.
            warn!(run = %run.id, workflow = %run.workflow, "claimed a run of an unknown workflow");
            let _ = self.store.release_lease(&lease).await;
            return;
        };
        if run.format > wf.format() {
            // Written by a newer version during a deploy: a process of that version drives it.
            warn!(run = %run.id, format = run.format, reads_up_to = wf.format(),
                  "run stored in a newer format; leaving it to a newer process");
            self.lock_newer().insert(run.id.clone());
            let _ = self.store.release_lease(&lease).await;
            return;
        }
        let (run, pending) = if run.format < wf.format() {
            // The upgrade rewrites the pending events: they are read again.
            match self.upgrade(&wf, run, &lease).await {
                Ok(Some(run)) => (run, None),
                Ok(None) => return,
                Err(e) => {
                    warn!(run = %lease.run_id, error = %ErrorChain(&e), "could not upgrade run");
                    let _ = self.store.release_lease(&lease).await;
                    return;
                }
            }
        } else {
            (run, pending)
        };
        let heartbeat = AbortOnDrop(tokio::spawn(heartbeat(
            self.store.clone(),
            lease.clone(),
            self.config.lease_ttl,
            lost_tx,
        )));
        let id = run.id.clone();
        let inbox = pending.map(Inbox::first_page).unwrap_or_default();
        let LetGo { release, told } = match self
            .drive_steps(&wf, run, inbox, mail, &lease, lost_rx)
            .await
        {
            Ok(let_go) => let_go,
            Err(e @ StoreError::Unavailable(_)) => {
                // Nothing the step did counts as an attempt: the run is let go as soon as the
                // database is back, and claimed again (here or elsewhere) from what it holds.
                warn!(run = %id, error = %ErrorChain(&e), "database unavailable; run let go when it is back");
                drop(heartbeat);
                self.release_when_back(&lease).await;
                self.notify(&id);
                self.wake.notify_one();
                return;
            }
            Err(e) => {
                warn!(run = %id, error = %ErrorChain(&e), "stopped driving run");
                LetGo::UNTOLD
            }
        };
        drop(heartbeat);
        if release {
            let _ = self.store.release_lease(&lease).await;
        }
        if !told {
            self.notify(&id);
        } else if release {
            // The lease was let go: the record changed, the stream did not.
            self.signals.touch(&id);
        }
    }

    /// Runs the claimed run's steps one after another. While the lease is held nobody else
    /// writes the run's state or its step inbox, so both are kept here between steps rather
    /// than read back: a step costs its own work and one commit. Quick steps share one: a
    /// step whose only result is one event for the next step is not committed at once; the
    /// next step runs on that event, and both commit together (see [`Chain`]). Returns how
    /// it let go of the run.
    async fn drive_steps(
        self: &Arc<Self>,
        wf: &Arc<dyn ErasedWorkflow>,
        run: RunRecord,
        inbox: Inbox,
        known_mail: Option<KnownMail>,
        lease: &Lease,
        lost: watch::Receiver<bool>,
    ) -> Result<LetGo, StoreError> {
        let deadline = run
            .deadline_at
            .map(|at| Instant::now() + Duration::from_millis((at - now_ms()).max(0) as u64));
        let mut held = HeldRun {
            engine: self,
            wf,
            lease,
            lost,
            draining: self.draining.subscribe(),
            deadline,
            run,
            inbox,
            known_mail,
            chain: None,
            cut_off: false,
        };
        loop {
            match held.one_step().await {
                Ok(()) => {}
                Err(Stop::LetGo(let_go)) => return Ok(let_go),
                Err(Stop::Failed(e)) => return Err(e),
            }
        }
    }

    /// Whether the next step may run on the one event `c`'s last step sent, before it is
    /// stored: nothing else is pending, the chain is short and young enough to give the step
    /// at least half the chain's wait, the run's deadline is not near, and that step has not
    /// needed its event stored before.
    fn may_run_ahead(
        &self,
        wf: &Arc<dyn ErasedWorkflow>,
        workflow: &str,
        c: &Chain,
        inbox: &Inbox,
        deadline: Option<Instant>,
    ) -> bool {
        let ([(event_type, _)], Some(head)) = (c.commit.sent.as_slice(), c.commit.consumed) else {
            return false;
        };
        let wait = self.config.chain_wait;
        c.ran.len() < CHAIN_STEPS
            && c.since.elapsed() < wait / 2
            && deadline.is_none_or(|d| d > Instant::now() + wait)
            && inbox.holds_only(head)
            && !self.is_draining()
            && wf.step_for(event_type).is_some_and(|(next, ..)| {
                !self
                    .lock_not_chained()
                    .contains(&(workflow.to_string(), next))
            })
    }

    /// Commits the steps of `c` and takes note of it here: their events go to this
    /// process's readers, the run's state and sent events to the driver's copies. Returns
    /// whether the run ended or parked (no longer driven here).
    async fn commit_steps(
        &self,
        lease: &Lease,
        run: &mut RunRecord,
        inbox: &mut Inbox,
        c: Chain,
    ) -> Result<bool, StoreError> {
        let Chain { commit, ran, .. } = c;
        let receipt = self.store.commit_step(lease, &commit).await?;
        self.publish(&run.id, &commit, &receipt.seqs, receipt.parked);
        for (step, started) in ran {
            telemetry::step_ran(&run.workflow, step, "committed", started.elapsed());
        }
        if !matches!(commit.outcome, StepOutcome::Continue) {
            self.ended(run, "completed");
            return Ok(true);
        }
        if receipt.parked {
            return Ok(true);
        }
        if let Some(state) = commit.state {
            run.state = state;
        }
        if let Some(consumed) = commit.consumed {
            inbox.committed(consumed, receipt.sent_ids.into_iter().zip(commit.sent));
        }
        Ok(false)
    }

    /// Commits a chain whose next step is not to be chained to it after all: with that
    /// step's event stored as sent, so the step runs on it as it would after a crash; and,
    /// with `park`, parks the run waiting for that event type in the same write, unless mail
    /// arrived since its mailbox counter. Returns whether the run parked.
    async fn commit_chain(
        &self,
        lease: &Lease,
        run: &mut RunRecord,
        inbox: &mut Inbox,
        mut c: Chain,
        park: Option<(String, i64)>,
    ) -> Result<bool, StoreError> {
        c.commit.sent.push(std::mem::take(&mut c.next));
        c.commit.park = park;
        self.commit_steps(lease, run, inbox, c).await
    }

    /// Lets go of `lease` once the database answers again, trying with backoff until the
    /// lease would have expired anyway (then whoever claims it first carries on).
    async fn release_when_back(&self, lease: &Lease) {
        let give_up = Instant::now() + self.config.lease_ttl;
        if let Err(e) = again_while_away(give_up, || self.store.release_lease(lease)).await {
            warn!(run = %lease.run_id, error = %ErrorChain(&e), "could not let the run go");
        }
    }

    /// Rewrites a run stored in an older format in the workflow's current one: its state, its
    /// pending step events and their journaled results, in one fenced write. A value the
    /// workflow cannot upgrade fails the run, saying why. None: the run has ended.
    async fn upgrade(
        &self,
        wf: &Arc<dyn ErasedWorkflow>,
        mut run: RunRecord,
        lease: &Lease,
    ) -> Result<Option<RunRecord>, StoreError> {
        let from = run.format;
        let pending = self.store.pending_events(&run.id, 10_000).await?;
        let scopes: Vec<i64> = pending.iter().map(|p| p.id).collect();
        let journal = self.store.journal_entries(&run.id, &scopes).await?;
        let upgraded = (|| {
            let state = wf.upgrade(from, Stored::State, run.state.clone())?;
            let inbox = pending
                .into_iter()
                .map(|p| {
                    Ok((
                        p.id,
                        wf.upgrade(from, Stored::StepEvent(&p.event_type), p.payload)?,
                    ))
                })
                .collect::<Result<Vec<_>, String>>()?;
            let journal = journal
                .into_iter()
                .map(|(scope, key, v)| {
                    let v = wf.upgrade(from, Stored::CallResult(&key), v)?;
                    Ok((scope, key, v))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok::<_, String>(RunUpgrade {
                format: wf.format(),
                state,
                inbox,
                journal,
            })
        })();
        match upgraded {
            Ok(upgrade) => {
                self.store.upgrade_run(lease, &upgrade).await?;
                info!(run = %run.id, from, to = upgrade.format, "run upgraded to the current stored format");
                run.state = upgrade.state;
                run.format = upgrade.format;
                Ok(Some(run))
            }
            Err(why) => {
                let msg = format!(
                    "the run was stored in format {from} and cannot be read in format {}: {why}",
                    wf.format()
                );
                warn!(run = %run.id, error = %msg, "run cannot be upgraded; failing it");
                self.fail_run(lease, &run, "upgrade", &msg, 1, 0.0).await?;
                self.notify(&run.id);
                Ok(None)
            }
        }
    }

    async fn fail_run(
        &self,
        lease: &Lease,
        run: &RunRecord,
        step: &str,
        message: &str,
        attempts: u32,
        elapsed_seconds: f64,
    ) -> Result<(), StoreError> {
        let event = Envelope::of(&WorkflowFailedEvent {
            step_name: step.to_string(),
            exception: ExceptionInfo {
                exception_type: "StepError".to_string(),
                exception_message: message.to_string(),
            },
            attempts,
            elapsed_seconds,
        })
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        self.finish(
            lease,
            run,
            step,
            StepOutcome::Failed {
                error: message.to_string(),
                event,
            },
        )
        .await?;
        self.ended(run, "failed");
        self.stopped(run, Stopped::Failed(message.to_string()))
            .await;
        Ok(())
    }

    async fn time_out(&self, lease: &Lease, run: &RunRecord, step: &str) -> Result<(), StoreError> {
        let timeout = run
            .deadline_at
            .map(|d| (d - run.created_at) as f64 / 1000.0)
            .unwrap_or(0.0);
        let event = Envelope::of(&WorkflowTimedOutEvent {
            timeout,
            active_steps: vec![step.to_string()],
        })
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let error = format!("run timed out after {timeout:.1}s in step {step}");
        self.finish(
            lease,
            run,
            step,
            StepOutcome::Failed {
                error: error.clone(),
                event,
            },
        )
        .await?;
        self.ended(run, "timed_out");
        self.stopped(run, Stopped::Failed(error)).await;
        Ok(())
    }

    /// Runs the workflow's hook for a run that was cancelled or failed, bounded in time.
    pub(super) async fn stopped(&self, run: &RunRecord, how: Stopped) {
        let Some(wf) = self.workflows.get(&run.workflow) else {
            return;
        };
        let hook = wf.on_stopped(run.state.clone(), how);
        if tokio::time::timeout(STOPPED_HOOK_LIMIT, hook)
            .await
            .is_err()
        {
            warn!(run = %run.id, "the stopped run's hook did not finish in time");
        }
    }

    /// Counts a run that ended here and closes its trace.
    pub(super) fn ended(&self, run: &RunRecord, status: &'static str) {
        if let Some(d) = self.lock_active().get_mut(&run.id) {
            d.ended = true;
        }
        telemetry::run_ended(&run.workflow, status);
        if let Some(tracer) = &self.config.tracer {
            tracer.ended(&run.id, &run.workflow, run.created_at, status);
        }
    }

    async fn finish(
        &self,
        lease: &Lease,
        run: &RunRecord,
        step: &str,
        outcome: StepOutcome,
    ) -> Result<(), StoreError> {
        let commit = StepCommit {
            consumed: None,
            step: step.to_string(),
            attempt: 0,
            started_at: now_ms(),
            state: None,
            stream: Vec::new(),
            sent: Vec::new(),
            mailbox_consumed: Vec::new(),
            outcome,
            chained: Vec::new(),
            park: None,
        };
        self.store.commit_step(lease, &commit).await?;
        self.notify(&run.id);
        Ok(())
    }
}

/// Why a driver stops driving a run, as a phase of a step decided: it lets go of the run
/// so, or a store call failed (`?` on a store call stops with its error).
enum Stop {
    LetGo(LetGo),
    Failed(StoreError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Stop {
        Stop::Failed(e)
    }
}

/// A claimed run as its driver holds it between steps: its state and step inbox as known
/// under the lease, the steps run ahead of their commit, and what ends the driving.
struct HeldRun<'a> {
    engine: &'a Engine,
    wf: &'a Arc<dyn ErasedWorkflow>,
    lease: &'a Lease,
    lost: watch::Receiver<bool>,
    draining: watch::Receiver<bool>,
    deadline: Option<Instant>,
    run: RunRecord,
    inbox: Inbox,
    known_mail: Option<KnownMail>,
    chain: Option<Chain>,
    /// A step cut off by its time limit may have stored a journaled call's events that
    /// it never told: from then on, what this driver tells is a raise, not a touch.
    cut_off: bool,
}

/// The step to run next, and the event it runs on.
struct NextStep {
    pending: PendingEvent,
    step: &'static str,
    timeout: Duration,
    retry: RetryPolicy,
}

/// One try of a step: its attempt number, when it started, and the time it was given.
struct Try {
    attempt: u32,
    started: Instant,
    started_at: i64,
    limit: Duration,
}

/// What a step's future gave back, unless it ran out of time.
type StepRun = Result<(Result<(), StepError>, StepEffects), tokio::time::error::Elapsed>;

/// Whether a step simply did its work: no error, and nothing refused it for running ahead
/// of its event's commit.
fn simply_done(outcome: &StepRun) -> bool {
    matches!(outcome, Ok((Ok(()), e)) if e.error.is_none() && !e.ran_ahead)
}

impl HeldRun<'_> {
    /// One pass of the driver, phase by phase: the next step is run, and what it did is
    /// committed, run ahead of its commit, parked, retried or failed; any phase may stop.
    async fn one_step(&mut self) -> Result<(), Stop> {
        self.still_driving().await?;
        let next = self.next_step().await?;
        let (tried, outcome) = self.run_step(&next).await?;
        if let Some(c) = self.chain.take_if(|_| !simply_done(&outcome)) {
            return self
                .commit_before_rerun(c, next.step, &tried, &outcome)
                .await;
        }
        let (result, effects) = self.result_of(next.step, &tried, outcome).await?;
        self.settle(&next, &tried, result, effects).await
    }

    /// The lease is still held, to be released; this process's readers heard everything
    /// unless a step was cut off.
    fn to_release(&self) -> LetGo {
        LetGo {
            release: true,
            told: !self.cut_off,
        }
    }

    /// The lease went with the run's last commit (it ended or parked), whose news told this
    /// process's readers, unless a step was cut off.
    fn let_go_in_commit(&self) -> LetGo {
        LetGo {
            release: false,
            told: !self.cut_off,
        }
    }

    /// Stops when the lease is lost, the process is shutting down (committing the steps run
    /// ahead first) or the run no longer runs.
    async fn still_driving(&mut self) -> Result<(), Stop> {
        if *self.lost.borrow() {
            return Err(Stop::LetGo(LetGo::GONE));
        }
        if *self.draining.borrow_and_update() {
            debug!(run = %self.run.id, "shutting down; letting the run go");
            if let Some(c) = self.chain.take() {
                self.engine
                    .commit_chain(self.lease, &mut self.run, &mut self.inbox, c, None)
                    .await?;
            }
            return Err(Stop::LetGo(self.to_release()));
        }
        if self.run.status != RunStatus::Running {
            return Err(Stop::LetGo(self.to_release()));
        }
        Ok(())
    }

    /// Finds the next event and the step that takes it, failing the run when there is none
    /// and timing it out (the steps run ahead committed first) when its deadline has passed.
    async fn next_step(&mut self) -> Result<NextStep, Stop> {
        let (engine, lease) = (self.engine, self.lease);
        let pending = match &self.chain {
            // The event the last step sent, not stored: it has no id.
            Some(c) => PendingEvent {
                id: 0,
                event_type: c.next.0.clone(),
                payload: c.next.1.clone(),
                attempts: 0,
            },
            None => match self.inbox.next(engine.store.as_ref(), &self.run.id).await? {
                Some(pending) => pending,
                None => {
                    engine
                        .fail_run(
                            lease,
                            &self.run,
                            "workflow",
                            "no step sent an event or stopped the run",
                            1,
                            0.0,
                        )
                        .await?;
                    return Err(Stop::LetGo(LetGo::GONE));
                }
            },
        };
        let Some((step, timeout, retry)) = self.wf.step_for(&pending.event_type) else {
            let msg = format!("no step accepts {}", pending.event_type);
            engine
                .fail_run(lease, &self.run, "workflow", &msg, 1, 0.0)
                .await?;
            return Err(Stop::LetGo(LetGo::GONE));
        };
        if let Some(d) = self.deadline
            && Instant::now() >= d
        {
            if let Some(c) = self.chain.take() {
                engine
                    .commit_chain(lease, &mut self.run, &mut self.inbox, c, None)
                    .await?;
            }
            engine.time_out(lease, &self.run, step).await?;
            return Err(Stop::LetGo(LetGo::GONE));
        }
        Ok(NextStep {
            pending,
            step,
            timeout,
            retry,
        })
    }

    /// Runs the step on its event within its time limit, abandoning it if the lease is lost.
    async fn run_step(&mut self, next: &NextStep) -> Result<(Try, StepRun), Stop> {
        let engine = self.engine;
        let (run, pending, step) = (&self.run, &next.pending, next.step);
        let ahead = self.chain.is_some();
        if ahead {
            // Kept out of chains until it is simply done: if it panics, the steps run
            // before it would be lost with it at every try; not chained, they commit.
            engine
                .lock_not_chained()
                .insert((run.workflow.clone(), step));
        }
        let attempt = pending.attempts as u32 + 1;
        let parts = CtxParts {
            store: engine.store.clone(),
            lease: self.lease.clone(),
            workflow: run.workflow.clone(),
            step,
            scope: pending.id,
            attempt,
            deadline: self.deadline,
            journal_empty: ahead || self.inbox.first_run(pending.id),
            signals: engine.signals.clone(),
            known_mail: self.known_mail.clone(),
            ahead_of_commit: ahead,
            mail_taken_ahead: self
                .chain
                .as_ref()
                .is_some_and(|c| !c.commit.mailbox_consumed.is_empty()),
        };
        // The message that woke the run is for the step it woke only; an empty mailbox
        // stays known empty (a delivery since moves its counter, and a park sees that).
        if matches!(self.known_mail, Some(KnownMail::Woke { .. })) {
            self.known_mail = None;
        }
        let mut limit = match self.deadline {
            Some(d) => next
                .timeout
                .min(d.saturating_duration_since(Instant::now())),
            None => next.timeout,
        };
        // A step run ahead of the commit before it holds back that commit's events: it
        // has until the chain's wait is over.
        if let Some(c) = &self.chain {
            limit = limit.min(engine.config.chain_wait.saturating_sub(c.since.elapsed()));
        }
        let started = Instant::now();
        let started_at = now_ms();
        let span = tracing::info_span!("step", otel.name = step, run_id = %run.id,
            workflow = %run.workflow, step, attempt);
        if let Some(tracer) = &engine.config.tracer {
            tracer.adopt(&span, &run.id);
        }
        debug!(parent: &span, "step start");
        let fut = self
            .wf
            .run_step(
                parts,
                &pending.event_type,
                pending.payload.clone(),
                run.state.clone(),
            )
            .instrument(span);
        let mut lost_wait = self.lost.clone();
        let outcome = tokio::select! {
            r = tokio::time::timeout(limit, fut) => r,
            _ = lost_wait.wait_for(|l| *l) => return Err(Stop::LetGo(LetGo::GONE)),
        };
        if ahead && simply_done(&outcome) {
            engine
                .lock_not_chained()
                .remove(&(run.workflow.clone(), step));
        }
        let tried = Try {
            attempt,
            started,
            started_at,
            limit,
        };
        Ok((tried, outcome))
    }

    /// Commits the steps run ahead of a step that was not simply done, with its event, so
    /// that it runs again on the stored event; parks the run in the same commit if it waits.
    async fn commit_before_rerun(
        &mut self,
        c: Chain,
        step: &'static str,
        tried: &Try,
        outcome: &StepRun,
    ) -> Result<(), Stop> {
        // Run ahead and not simply done (it needs its event stored, waits, took too
        // long, or failed): what ran before it is committed with its event, and it
        // runs again on the stored event, as after a crash. A step that needed its
        // event or ran out of time is not run ahead again in this process.
        let not_for_chains = match outcome {
            Ok((Err(StepError::RanAhead), _)) => true,
            Ok((_, effects)) => effects.ran_ahead,
            Err(_) => true,
        };
        if !not_for_chains {
            self.engine
                .lock_not_chained()
                .remove(&(self.run.workflow.clone(), step));
        }
        // A step that waits parks the run in the same commit (unless mail arrived
        // since it looked): it runs again when woken, as it would have anyway.
        let park = match outcome {
            Ok((
                Err(StepError::Suspend {
                    event_type,
                    mailbox_seq,
                }),
                effects,
            )) if !effects.ran_ahead => Some((event_type.clone(), *mailbox_seq)),
            _ => None,
        };
        let parking = park.clone();
        if self
            .engine
            .commit_chain(self.lease, &mut self.run, &mut self.inbox, c, park)
            .await?
        {
            let event_type = parking.map(|(t, _)| t).unwrap_or_default();
            debug!(run = %self.run.id, step, %event_type, "parked");
            telemetry::step_ran(&self.run.workflow, step, "parked", tried.started.elapsed());
            // Its news said so.
            return Err(Stop::LetGo(self.let_go_in_commit()));
        }
        if parking.is_some() {
            // Mail arrived: the step runs again and looks.
            self.known_mail = None;
        }
        Ok(())
    }

    /// What the step did, as a result and its effects: a step out of time failed (and is cut
    /// off), unless the run's deadline passed, which times the run out.
    async fn result_of(
        &mut self,
        step: &'static str,
        tried: &Try,
        outcome: StepRun,
    ) -> Result<(Result<(), StepError>, StepEffects), Stop> {
        let (result, effects) = match outcome {
            Ok(pair) => pair,
            Err(_) if self.deadline.is_some_and(|d| Instant::now() >= d) => {
                self.engine.time_out(self.lease, &self.run, step).await?;
                return Err(Stop::LetGo(LetGo::GONE));
            }
            Err(_) => {
                self.cut_off = true;
                (
                    Err(StepError::failed(format!(
                        "step timed out after {:.1}s",
                        tried.limit.as_secs_f64()
                    ))),
                    Default::default(),
                )
            }
        };
        let result = match (result, &effects.error) {
            (Ok(()), Some(e)) => Err(StepError::failed(e)),
            (r, _) => r,
        };
        Ok((result, effects))
    }

    /// Acts on the step's result: commits what it did (or lets the next step run ahead of
    /// the commit), parks the run where it waits, or retries the step or fails the run.
    async fn settle(
        &mut self,
        next: &NextStep,
        tried: &Try,
        result: Result<(), StepError>,
        effects: StepEffects,
    ) -> Result<(), Stop> {
        let step = next.step;
        match result {
            Ok(()) => self.commit_or_run_ahead(next, tried, effects).await,
            Err(StepError::RanAhead) => {
                // Only a step run ahead of its event's commit ends so; handled above.
                Err(Stop::Failed(StoreError::backend(format!(
                    "step {step} ran ahead of a commit that was not pending"
                ))))
            }
            Err(StepError::Suspend {
                event_type,
                mailbox_seq,
            }) => self.park(step, tried, event_type, mailbox_seq).await,
            Err(StepError::LeaseLost) => Err(Stop::LetGo(LetGo::GONE)),
            Err(StepError::Store(StoreError::Unavailable(e))) => {
                Err(Stop::Failed(StoreError::Unavailable(e)))
            }
            Err(
                err
                @ (StepError::Failed { .. } | StepError::Store(_) | StepError::Permanent { .. }),
            ) => self.retry_or_fail(next, tried, err).await,
        }
    }

    /// Adds a step done to the steps run ahead, and either lets the next step run ahead on
    /// the one event it sent or commits them all.
    async fn commit_or_run_ahead(
        &mut self,
        next: &NextStep,
        tried: &Try,
        effects: StepEffects,
    ) -> Result<(), Stop> {
        let step = next.step;
        let outcome = match effects.stop.clone() {
            Some(env) => StepOutcome::Completed(env),
            None => StepOutcome::Continue,
        };
        let done = !matches!(outcome, StepOutcome::Continue);
        let commit = StepCommit {
            consumed: Some(next.pending.id),
            step: step.to_string(),
            attempt: tried.attempt as i64,
            started_at: tried.started_at,
            state: effects.state,
            stream: effects.stream,
            sent: effects.sent,
            mailbox_consumed: effects.mailbox_consumed,
            outcome,
            chained: Vec::new(),
            park: None,
        };
        crate::context::crash_point(step, "commit").await;
        let mut c = match self.chain.take() {
            Some(c) => c.then(commit, step, tried.started),
            None => Chain::first(commit, step, tried.started),
        };
        if !done
            && self.engine.may_run_ahead(
                self.wf,
                &self.run.workflow,
                &c,
                &self.inbox,
                self.deadline,
            )
        {
            // The next step takes the one event sent, before it is stored.
            if let Some(state) = &c.commit.state {
                self.run.state = state.clone();
            }
            c.next = c.commit.sent.pop().unwrap_or_default();
            self.chain = Some(c);
            return Ok(());
        }
        if self
            .engine
            .commit_steps(self.lease, &mut self.run, &mut self.inbox, c)
            .await?
        {
            return Err(Stop::LetGo(self.let_go_in_commit()));
        }
        Ok(())
    }

    /// Parks the run waiting for `event_type`, unless mail arrived since the step looked
    /// (then the step runs again and looks).
    async fn park(
        &mut self,
        step: &'static str,
        tried: &Try,
        event_type: String,
        mailbox_seq: i64,
    ) -> Result<(), Stop> {
        let engine = self.engine;
        match engine
            .store
            .suspend(self.lease, &event_type, mailbox_seq)
            .await?
        {
            SuspendOutcome::Suspended => {
                debug!(run = %self.run.id, step, %event_type, "parked");
                telemetry::step_ran(&self.run.workflow, step, "parked", tried.started.elapsed());
                // A park stores no event: only the record changed.
                if self.cut_off {
                    engine.notify(&self.run.id);
                } else {
                    engine.signals.touch(&self.run.id);
                }
                Err(Stop::LetGo(LetGo {
                    release: false,
                    told: true,
                }))
            }
            SuspendOutcome::MailArrived => {
                self.known_mail = None;
                Ok(())
            }
        }
    }

    /// Records a failed attempt and waits its backoff when the step may try again (unless
    /// the lease is lost or the process shuts down meanwhile); otherwise fails the run.
    async fn retry_or_fail(
        &mut self,
        next: &NextStep,
        tried: &Try,
        err: StepError,
    ) -> Result<(), Stop> {
        let (engine, run) = (self.engine, &self.run);
        let (step, attempt, started) = (next.step, tried.attempt, tried.started);
        // The failure with what failed underneath, for the log and the run's error.
        let msg = err.chain();
        if err.is_retryable() && attempt < next.retry.max_attempts {
            warn!(run = %run.id, step, attempt, error = %msg, "step failed; retrying");
            telemetry::step_ran(&run.workflow, step, "retried", started.elapsed());
            engine
                .store
                .record_attempt_failure(self.lease, next.pending.id, &msg)
                .await?;
            self.inbox.failed(next.pending.id);
            let mut lost_wait = self.lost.clone();
            tokio::select! {
                _ = tokio::time::sleep(next.retry.backoff(attempt + 1)) => {}
                _ = lost_wait.wait_for(|l| *l) => return Err(Stop::LetGo(LetGo::GONE)),
                _ = self.draining.wait_for(|d| *d) => return Err(Stop::LetGo(LetGo::UNTOLD)),
            }
            Ok(())
        } else {
            warn!(run = %run.id, step, attempt, error = %msg, "step failed; run failed");
            telemetry::step_ran(&run.workflow, step, "failed", started.elapsed());
            let elapsed = started.elapsed().as_secs_f64();
            engine
                .fail_run(self.lease, run, step, &msg, attempt, elapsed)
                .await?;
            Err(Stop::LetGo(LetGo::GONE))
        }
    }
}

/// Renews the lease every third of its lifetime; reports loss so the step is abandoned.
async fn heartbeat(
    store: Arc<dyn RunStore>,
    lease: Lease,
    ttl: Duration,
    lost: watch::Sender<bool>,
) {
    let ttl_ms = ttl.as_millis() as i64;
    loop {
        tokio::time::sleep(ttl / 3).await;
        match store.renew_lease(&lease, ttl_ms).await {
            Ok(true) => {}
            Ok(false) => {
                let _ = lost.send(true);
                return;
            }
            // A transient failure: try again; the lease still has two thirds of its life.
            Err(e) => warn!(run = %lease.run_id, error = %ErrorChain(&e), "lease renewal failed"),
        }
    }
}

/// The run's pending step events, oldest first, as known to the process holding its lease.
/// Read from the store a page at a time; what a commit consumes and sends is applied here.
#[derive(Default)]
struct Inbox {
    queue: VecDeque<PendingEvent>,
    /// Whether `queue` holds every pending event, so events sent by a commit go at its end;
    /// otherwise the next page is read from the store once `queue` runs out.
    complete: bool,
    /// Events sent by this lease holder's commits that no step has run on yet: nothing can
    /// be journaled under them.
    unrun: HashSet<i64>,
}

/// Steps run and not committed yet: a step whose only result was one event for the next
/// step, and the steps run on such events after it, up to [`CHAIN_STEPS`] and for at most
/// [`EngineConfig::chain_wait`] (the first one's events wait for the commit). They are
/// committed as one [`StepCommit`]; the events passed between them are never stored. A crash
/// before the commit runs them again from the first one's event, as it would that step alone.
struct Chain {
    commit: StepCommit,
    /// The event the next step runs on, taken out of `commit.sent`.
    next: (String, Value),
    /// When its first step was done.
    since: Instant,
    /// Its steps, and when each started (for telemetry once committed).
    ran: Vec<(&'static str, Instant)>,
}

impl Chain {
    fn first(commit: StepCommit, step: &'static str, started: Instant) -> Chain {
        Chain {
            commit,
            next: Default::default(),
            since: Instant::now(),
            ran: vec![(step, started)],
        }
    }

    /// `step` ran on the chain's next event, with `c` as its result.
    fn then(mut self, c: StepCommit, step: &'static str, started: Instant) -> Chain {
        let merged = &mut self.commit;
        if c.state.is_some() {
            merged.state = c.state;
        }
        merged.stream.extend(c.stream);
        merged.sent = c.sent;
        merged.mailbox_consumed.extend(c.mailbox_consumed);
        merged.outcome = c.outcome;
        merged.chained.push(ChainedStep {
            step: c.step,
            attempt: c.attempt,
            started_at: c.started_at,
        });
        self.ran.push((step, started));
        self
    }
}

/// Steps committed together at most.
const CHAIN_STEPS: usize = 16;

/// Pending events read from the store at a time.
const INBOX_PAGE: i64 = crate::store::CLAIM_INBOX_PAGE;

impl Inbox {
    /// The inbox of a run whose first page of pending events came with its claim.
    fn first_page(page: Vec<PendingEvent>) -> Inbox {
        Inbox {
            complete: (page.len() as i64) < INBOX_PAGE,
            queue: page.into(),
            unrun: HashSet::new(),
        }
    }

    async fn next(
        &mut self,
        store: &dyn RunStore,
        run_id: &str,
    ) -> Result<Option<PendingEvent>, StoreError> {
        if self.queue.is_empty() && !self.complete {
            let page = store.pending_events(run_id, INBOX_PAGE).await?;
            self.complete = (page.len() as i64) < INBOX_PAGE;
            self.queue.extend(page);
        }
        Ok(self.queue.front().cloned())
    }

    /// The front event was consumed by a commit that sent `sent` (id, type, payload).
    fn committed(&mut self, consumed: i64, sent: impl Iterator<Item = (i64, (String, Value))>) {
        if self.queue.front().is_some_and(|p| p.id == consumed) {
            self.queue.pop_front();
        }
        for (id, (event_type, payload)) in sent {
            self.unrun.insert(id);
            if self.complete {
                self.queue.push_back(PendingEvent {
                    id,
                    event_type,
                    payload,
                    attempts: 0,
                });
            }
        }
    }

    /// Whether a step is about to run on `pending` for the first time since this lease
    /// holder's commit sent it (a step run again, after a failure or on mail that arrived
    /// as it parked, may have journaled calls).
    fn first_run(&mut self, pending: i64) -> bool {
        self.unrun.remove(&pending)
    }

    /// Whether no event is pending but `id` (or none at all).
    fn holds_only(&self, id: i64) -> bool {
        self.complete && self.queue.iter().all(|p| p.id == id)
    }

    /// The front event's attempt failed and was recorded.
    fn failed(&mut self, pending: i64) {
        if let Some(p) = self.queue.front_mut()
            && p.id == pending
        {
            p.attempts += 1;
        }
    }
}
