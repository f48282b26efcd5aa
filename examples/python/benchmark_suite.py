"""The benchmark from Python: the device-agreement suite's SGLD and GAN workloads on the CPU,
each variant's time and quality from the report (pip install ./crates/quench-py). Run from the
repository's root; python -m quench run --suite configs/devices.toml is the same from a shell."""
import quench

report = quench.bench.run("configs/devices.toml", device="cpu", only=["sgld", "qrng-gan"])
for workload in report["workloads"]:
    for variant in workload["variants"]:
        quality = variant["quality"]
        print(f"{workload['name']}/{variant['name']}: "
              f"{variant['per_iteration_s']['median'] * 1e3:.2f} ms per {variant['iteration_unit']}, "
              f"{quality['metric']} {quality['value']:.4f}")
