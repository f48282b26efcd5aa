//! Closed-form cases: pure dephasing, amplitude damping, Rabi oscillation, the driven damped
//! qubit's steady state and the relax-dephase preset, for the exact solver, and for Euler and
//! RK4 against the closed form of their own step (`g(z)^N` with `g(z) = 1 + z` or the
//! degree-4 Taylor polynomial), which pins down their step count and size.

use super::common::{initial_states, tensor, values};
use crate::{
    Basis, Batch, CMatrix, Generators, Method, Output, RelaxDephaseTask, Solver, System, operators,
    presets,
};
use num_complex::Complex64;
use quench_kernels::QuenchOps;

const SEGMENTS: usize = 20;

/// The final density matrix of one task with constant amplitudes over `t_total`.
fn evolve<B: QuenchOps>(
    system: &System,
    method: Method,
    t_total: f64,
    amplitudes: &[f64],
    rates: &[f64],
    rho0: &CMatrix,
    device: &B::Device,
) -> CMatrix {
    let basis = Basis::gell_mann(system.dim());
    let generators = Generators::<B>::upload(system, device);
    let batch = Batch {
        t_total,
        amplitudes: tensor(
            amplitudes.repeat(SEGMENTS),
            [1, SEGMENTS, amplitudes.len()],
            device,
        ),
        rates: tensor(rates.to_vec(), [1, rates.len()], device),
        initial: initial_states(&basis, rho0, 1, device).unwrap(),
    };
    let solver = Solver {
        method,
        rate_bound: 2.0,
        ..Solver::default()
    };
    let states = solver
        .evolve(&generators, batch, Output::States)
        .unwrap()
        .states;
    basis.operator(&values(states)).unwrap()
}

/// Steps of `dt` per segment of `t_segment` and the step's growth factor `g(z)`.
fn step_factor(method: Method, t_segment: f64, z: Complex64) -> (usize, Complex64) {
    let (dt, taylor_degree) = match method {
        Method::Euler { dt } => (dt, 1),
        Method::Rk4 { dt } => (dt, 4),
        Method::Exact => return (1, (z * t_segment).exp()),
    };
    let substeps = ((t_segment / dt).floor() as usize).max(1);
    let hz = z * (t_segment / substeps as f64);
    let mut term = Complex64::new(1.0, 0.0);
    let mut g = term;
    for k in 1..=taylor_degree {
        term *= hz / k as f64;
        g += term;
    }
    (substeps, g)
}

/// `exp(z t_total)` as the method approximates it: `g(z h)^(substeps * segments)`.
fn propagated(method: Method, t_total: f64, z: Complex64) -> Complex64 {
    let (substeps, g) = step_factor(method, t_total / SEGMENTS as f64, z);
    g.powi((substeps * SEGMENTS) as i32)
}

const METHODS: [(Method, f64); 3] = [
    (Method::Exact, 2e-6),
    (Method::Rk4 { dt: 0.01 }, 2e-6),
    (Method::Euler { dt: 0.02 }, 2e-6),
];

fn plus_state() -> CMatrix {
    let h = std::f64::consts::FRAC_1_SQRT_2;
    operators::pure_state(&[Complex64::new(h, 0.0), Complex64::new(h, 0.0)])
}

quench_kernels::device_test! {
    fn pure_dephasing_decays_coherence_at_twice_the_rate<B>(device) {
        let system = System::new(CMatrix::zeros(2), vec![], vec![operators::pauli_z()]).unwrap();
        let gamma = 0.7;
        for (method, tolerance) in METHODS {
            let rho = evolve::<B::InnerBackend>(
                &system,
                method,
                1.0,
                &[],
                &[gamma],
                &plus_state(),
                device,
            );
            let expected = 0.5 * propagated(method, 1.0, Complex64::new(-2.0 * gamma, 0.0)).re;
            assert!(
                (rho.get(0, 1).re - expected).abs() < tolerance,
                "{method:?}: {} vs {expected}",
                rho.get(0, 1)
            );
            assert!((rho.get(0, 0).re - 0.5).abs() < tolerance);
        }
        let exact = evolve::<B::InnerBackend>(
            &system,
            Method::Exact,
            1.0,
            &[],
            &[gamma],
            &plus_state(),
            device,
        );
        assert!((exact.get(0, 1).re - 0.5 * (-2.0 * gamma).exp()).abs() < 2e-6);
    }

    fn amplitude_damping_empties_zero_at_the_rate<B>(device) {
        let system =
            System::new(CMatrix::zeros(2), vec![], vec![operators::sigma_minus()]).unwrap();
        let gamma = 1.3;
        let rho0 = operators::basis_state(2, 0);
        for (method, tolerance) in METHODS {
            let rho = evolve::<B::InnerBackend>(&system, method, 1.0, &[], &[gamma], &rho0, device);
            let expected = propagated(method, 1.0, Complex64::new(-gamma, 0.0)).re;
            assert!(
                (rho.get(0, 0).re - expected).abs() < tolerance,
                "{method:?}: {} vs {expected}",
                rho.get(0, 0)
            );
            assert!((rho.get(1, 1).re - (1.0 - expected)).abs() < tolerance);
        }
        let exact =
            evolve::<B::InnerBackend>(&system, Method::Exact, 1.0, &[], &[gamma], &rho0, device);
        assert!((exact.get(0, 0).re - (-gamma).exp()).abs() < 2e-6);
    }

    fn undamped_rabi_oscillation_follows_sin_squared<B>(device) {
        // H = u sx rotates the Bloch vector about x at 2u: z + i y evolves as exp(-2iu t).
        let system = System::new(CMatrix::zeros(2), vec![operators::pauli_x()], vec![]).unwrap();
        let rho0 = operators::basis_state(2, 0);
        for u in [0.4, 1.9, 3.0] {
            for (method, tolerance) in METHODS {
                let rho = evolve::<B::InnerBackend>(&system, method, 1.0, &[u], &[], &rho0, device);
                let w = propagated(method, 1.0, Complex64::new(0.0, -2.0 * u));
                let (z, y) = (rho.get(0, 0).re - rho.get(1, 1).re, -2.0 * rho.get(0, 1).im);
                assert!(
                    (z - w.re).abs() < 2.0 * tolerance && (y - w.im).abs() < 2.0 * tolerance,
                    "{method:?} u {u}: ({z}, {y}) vs {w}"
                );
            }
            let exact =
                evolve::<B::InnerBackend>(&system, Method::Exact, 1.0, &[u], &[], &rho0, device);
            assert!((exact.get(1, 1).re - u.sin().powi(2)).abs() < 2e-6, "u {u}");
        }
    }

    fn driven_damped_qubit_reaches_its_steady_state<B>(device) {
        // H = u sx (Rabi frequency 2u), decay s- at gamma from |0> to |1>: the steady state has
        // rho_00 = W^2 / (gamma^2 + 2 W^2) and rho_01 = -i W gamma / (gamma^2 + 2 W^2), W = 2u.
        let system = System::new(
            CMatrix::zeros(2),
            vec![operators::pauli_x()],
            vec![operators::sigma_minus()],
        )
        .unwrap();
        let (u, gamma) = (0.5, 1.0);
        let w = 2.0 * u;
        let denominator = gamma * gamma + 2.0 * w * w;
        for (method, tolerance) in [(Method::Exact, 1e-5), (Method::Rk4 { dt: 0.01 }, 1e-5)] {
            let rho = evolve::<B::InnerBackend>(
                &system,
                method,
                40.0,
                &[u],
                &[gamma],
                &operators::basis_state(2, 1),
                device,
            );
            assert!(
                (rho.get(0, 0).re - w * w / denominator).abs() < tolerance,
                "{method:?} {}",
                rho.get(0, 0)
            );
            assert!(
                (rho.get(0, 1) - Complex64::new(0.0, -w * gamma / denominator)).norm() < tolerance,
                "{method:?} {}",
                rho.get(0, 1)
            );
        }
    }

    fn relax_dephase_preset_decays_at_its_task_rates<B>(device) {
        let task = RelaxDephaseTask {
            g_relax: 0.08,
            g_deph: 0.15,
        };
        let t = 3.0;
        let rho = evolve::<B::InnerBackend>(
            &presets::relax_dephase(),
            Method::Exact,
            t,
            &[0.0, 0.0],
            &task.rates().unwrap(),
            &plus_state(),
            device,
        );
        // Longer segments take more squarings, each doubling the f32 rounding of the last.
        assert!((rho.get(0, 0).re - 0.5 * (-task.g_relax * t).exp()).abs() < 1e-5);
        let coherence = 0.5 * (-(task.g_relax / 2.0 + task.g_deph) * t).exp();
        assert!(
            (rho.get(0, 1).norm() - coherence).abs() < 1e-5,
            "{} vs {coherence}",
            rho.get(0, 1)
        );
    }
}
