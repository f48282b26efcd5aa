//! Meta-learning behaviour: batching changes nothing but speed, the meta-step learns, the
//! inner loop adapts, configurations are checked.

use crate::maml::adapt;
use crate::{
    Algorithm, InnerLoop, MetaConfig, MetaError, MetaRun, Operators, SystemChoice, Target,
    TaskFamily,
};
use quench_kernels::readback::to_host_f32;
use quench_lindblad::{Method, OperatorCache, Solver};
use quench_support::stats::max_abs_difference as max_abs;
use quench_train::params::{max_abs_difference, max_relative_difference};
use quench_train::settings::Valid;

fn small(algorithm: Algorithm) -> MetaConfig {
    MetaConfig {
        algorithm,
        iterations: 30,
        tasks_per_batch: 4,
        inner_steps: 2,
        inner_lr: 0.01,
        meta_lr: 0.02,
        val_tasks: 6,
        val_interval: 30,
        seed: 11,
        ..MetaConfig::default()
    }
}

quench_kernels::device_test! {
    fn batched_meta_step_equals_the_one_task_at_a_time_step<B>(device) {
        for algorithm in [Algorithm::Fomaml, Algorithm::Reptile] {
            // Towards X from |0> every task's loss starts at 1 to f32 precision with
            // gradients of about 1e-9; towards H they start near 0.5 with gradients of a
            // size a comparison can read.
            let config = Valid::new(MetaConfig {
                target: Target::H,
                ..small(algorithm)
            })
            .unwrap();
            let mut run = MetaRun::<B>::new(&config, &mut OperatorCache::new(), device).unwrap();
            let batch = run.next_batch().unwrap();
            let shape = run.config.policy.clone();
            // The one-task-at-a-time step is the original's way, autodiff throughout; the batched
            // step is checked with autodiff and with the hand-derived policy gradients.
            let original = InnerLoop {
                steps: 2,
                lr: 0.05,
                fused: false,
            };
            let start = run.learner.clone();
            let alone = start
                .meta_gradients_one_task_at_a_time(&run.problem, &shape, &batch, original)
                .unwrap();
            let alone_losses = [to_host_f32(alone.before.clone()), to_host_f32(alone.after.clone())];
            for fused in [false, true] {
                let inner = InnerLoop { fused, ..original };
                let batched = start.meta_gradients(&run.problem, &shape, &batch, inner).unwrap();
                let losses = [to_host_f32(batched.before), to_host_f32(batched.after)];
                for (found, expected) in losses.iter().zip(&alone_losses) {
                    let d = max_abs(found, expected);
                    assert!(d < 1e-5, "{algorithm:?}, fused {fused}: {found:?} vs {expected:?}");
                }
                assert!(
                    losses[0].iter().zip(&losses[1]).any(|(b, a)| (b - a).abs() > 1e-3),
                    "{algorithm:?}: the inner steps must change the losses: {losses:?}"
                );
                // Compared before Adam: its first step is about the learning rate times the
                // sign of each entry, which hides a wrong size and magnifies the rounding of
                // entries near zero. Measured: autodiff batched and alone agree exactly on the
                // CPU and on lavapipe; the CPU's hand-derived step parts by 4e-7 (first-order
                // MAML) and 1.7e-5 (Reptile) of the gradients' size.
                let d = max_relative_difference(&batched.per_task, &alone.per_task);
                assert!(d < 1e-4, "{algorithm:?}, fused {fused}: meta-gradients differ by {d} of their size");
                let mut learner = start.clone();
                learner.step(&run.problem, &shape, &batch, inner).unwrap();
                let moved = max_abs_difference(&learner.policy.params(), &start.policy.params());
                assert!(
                    moved > 1e-4,
                    "{algorithm:?}, fused {fused}: the step must move the policy"
                );
            }
        }
    }

    fn a_small_inner_step_lowers_every_tasks_loss<B>(device) {
        let mut run = MetaRun::<B>::new(
            &Valid::new(small(Algorithm::Fomaml)).unwrap(),
            &mut OperatorCache::new(),
            device,
        )
        .unwrap();
        for _ in 0..10 {
            run.step().unwrap();
        }
        let batch = run.next_batch().unwrap();
        let shape = run.config.policy.clone();
        for (lr, fused) in [(1e-4, false), (3e-4, false), (1e-4, true), (3e-4, true)] {
            let (before, phi) = adapt(
                &run.problem,
                &shape,
                &run.learner.policy,
                &batch,
                InnerLoop {
                    steps: 1,
                    lr,
                    fused,
                },
            )
            .unwrap();
            let after = crate::maml::evaluate(
                &run.problem,
                &shape,
                &run.learner.policy.with_params(phi),
                &batch,
            )
            .unwrap();
            let (before, after) = (
                quench_kernels::readback::to_host_f32(before),
                quench_kernels::readback::to_host_f32(after),
            );
            // A step along each task's own negative gradient must not raise its loss: this checks
            // the gradient of every member, through policy, simulator and fidelity.
            for (b, a) in before.iter().zip(&after) {
                assert!(
                    a <= &(b + 1e-6),
                    "lr {lr}: before {before:?} after {after:?}"
                );
            }
            assert!(
                before.iter().zip(&after).any(|(b, a)| a < &(b - 1e-5)),
                "lr {lr}: nothing moved"
            );
        }
    }

    fn training_raises_the_validation_fidelity<B>(device) {
        for algorithm in [Algorithm::Fomaml, Algorithm::Reptile] {
            let config = Valid::new(MetaConfig {
                iterations: 40,
                val_interval: 20,
                ..small(algorithm)
            })
            .unwrap();
            let mut run = MetaRun::<B>::new(&config, &mut OperatorCache::new(), device).unwrap();
            let start = run.validate(0).unwrap();
            let mut calls = 0;
            let history = run.train(|_, _| calls += 1).unwrap();
            assert_eq!(
                (calls, history.iterations.len(), history.validations.len()),
                (40, 40, 2)
            );
            let end = history.last_validation().unwrap();
            assert!(
                end.after.squared_overlap.mean > start.after.squared_overlap.mean + 0.2,
                "{algorithm:?}: {} -> {}",
                start.after.squared_overlap.mean,
                end.after.squared_overlap.mean
            );
            assert!(
                end.after.state.mean >= end.after.squared_overlap.mean - 1e-6,
                "F >= F^2"
            );
        }
    }

    fn rebuilt_operators_and_other_solvers_give_the_same_losses<B>(device) {
                let run = MetaRun::<B>::new(
            &Valid::new(small(Algorithm::Fomaml)).unwrap(),
            &mut OperatorCache::new(),
            device,
        )
        .unwrap();
        let batch = run
            .problem
            .prepare(&TaskFamily::OneOverF.sample(3, &mut rand::SeedableRng::seed_from_u64(2)))
            .unwrap();
        let shape = run.config.policy.clone();
        let policy = run.learner.policy.clone();
        let loss = |problem: &crate::ControlProblem<B>| {
            crate::maml::evaluate(problem, &shape, &policy, &batch)
                .map(quench_kernels::readback::to_host_f32)
                .unwrap()
        };
        let cached = loss(&run.problem);
        let rebuilt = loss(
            &run.problem
                .clone()
                .with_operators(Operators::RebuiltPerCall),
        );
        assert_eq!(cached, rebuilt);
        let rk4 = loss(&run.problem.clone().with_solver(Solver {
            method: Method::Rk4 { dt: 0.01 },
            ..Solver::default()
        }));
        for (e, r) in cached.iter().zip(&rk4) {
            assert!((e - r).abs() < 1e-3, "exact {e} vs rk4 {r}");
        }
    }

    fn inconsistent_configurations_are_refused_by_field<B>(device) {
                let cases = [
            (
                MetaConfig {
                    tasks: TaskFamily::DirectRates,
                    ..MetaConfig::default()
                },
                "tasks",
            ),
            (
                MetaConfig {
                    system: SystemChoice::RelaxDephase,
                    ..MetaConfig::default()
                },
                "system",
            ),
            (
                MetaConfig {
                    system: SystemChoice::TwoQubit,
                    ..MetaConfig::default()
                },
                "policy.controls",
            ),
            (
                MetaConfig {
                    tasks_per_batch: 0,
                    ..MetaConfig::default()
                },
                "tasks_per_batch",
            ),
        ];
        for (config, field) in cases {
            let err = Valid::new(config)
                .and_then(|valid| MetaRun::<B>::new(&valid, &mut OperatorCache::new(), device))
                .err()
                .unwrap();
            assert!(
                matches!(&err, MetaError::Config { field: f, .. } if *f == field),
                "{err}"
            );
        }
        let direct = MetaConfig {
            tasks: TaskFamily::DirectRates,
            system: SystemChoice::RelaxDephase,
            ..small(Algorithm::Fomaml)
        };
        let mut run = MetaRun::<B>::new(&Valid::new(direct).unwrap(), &mut OperatorCache::new(), device).unwrap();
        assert!(run.step().unwrap().loss_after.is_finite());
    }

    fn bad_numbers_are_refused_before_any_work_naming_the_field<B>(device) {
        use quench_lindblad::OperatorCache;
        use crate::{MetaConfig, MetaRun};
                type Spoil = fn(&mut MetaConfig);
        let cases: [(&str, Spoil); 9] = [
            ("policy.hidden", |c| c.policy.hidden = vec![128, 0]),
            ("policy.segments", |c| c.policy.segments = 0),
            ("meta_lr", |c| c.meta_lr = -0.01),
            ("meta_lr", |c| c.meta_lr = f64::NAN),
            ("inner_lr", |c| c.inner_lr = f64::INFINITY),
            ("grad_clip", |c| c.grad_clip = -1.0),
            ("policy.init_gain", |c| c.policy.init_gain = f64::NAN),
            ("policy.output_scale", |c| {
                c.policy.output_scale = f64::INFINITY
            }),
            ("t_total", |c| c.t_total = 0.0),
        ];
        for (field, spoil) in cases {
            let mut config = MetaConfig::default();
            spoil(&mut config);
            let err = Valid::new(config)
                .and_then(|valid| MetaRun::<B>::new(&valid, &mut OperatorCache::new(), device))
                .err()
                .unwrap_or_else(|| panic!("{field}: accepted"))
                .to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }

    fn training_that_diverges_stops_with_the_iteration_named<B>(device) {
        use quench_lindblad::OperatorCache;
        use crate::{MetaConfig, MetaRun};
        // An inner rate this large sends the adapted controls far past every bound within the
        // five inner steps: losses stay finite (clamped controls) or the gradients overflow; the
        // run must either train finitely or stop with a named iteration, never run on NaN.
        let config = Valid::new(MetaConfig {
            iterations: 3,
            tasks_per_batch: 2,
            val_tasks: 2,
            inner_lr: 1e30,
            ..MetaConfig::default()
        })
        .unwrap();
        let mut run = MetaRun::<B>::new(&config, &mut OperatorCache::new(), device).unwrap();
        match run.train(|_, _| {}) {
            Ok(history) => assert!(
                history
                    .iterations
                    .iter()
                    .all(|r| r.stats.loss_before.is_finite() && r.stats.loss_after.is_finite()),
                "{history:?}"
            ),
            Err(err) => assert!(err.to_string().contains("meta-iteration"), "{err}"),
        }
    }

    fn a_run_stopped_between_iterations_keeps_the_ones_that_finished<B>(device) {
        use quench_lindblad::OperatorCache;
        use crate::{MetaConfig, MetaRun};
        // Stopped after the second of six iterations: two records, and the validation that
        // the second ran (every second iteration here); none after.
        let config = Valid::new(MetaConfig {
            iterations: 6,
            val_interval: 2,
            ..small(Algorithm::Fomaml)
        })
        .unwrap();
        let mut run = MetaRun::<B>::new(&config, &mut OperatorCache::new(), device).unwrap();
        let history = run
            .train_while(&quench_scale::World::alone(), |record, _| record.iteration < 2)
            .unwrap();
        let iterations: Vec<usize> = history.iterations.iter().map(|r| r.iteration).collect();
        assert_eq!(iterations, [1, 2]);
        let validated: Vec<usize> = history.validations.iter().map(|v| v.iteration).collect();
        assert_eq!(validated, [2]);
    }
}
