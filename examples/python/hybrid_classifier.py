"""Guide 003 from Python: the hybrid quantum-classical classifier (frozen ResNet18, 4-qubit
circuit, head) on 4,096 Fashion-MNIST images of its ten classes (or the stand-in where none is
installed), two seeds in one batched program, five epochs (the original: 54,000 images, ten
epochs); pip install ./crates/quench-py. Run from the repository's root."""
from quench import hybrid

outcome = hybrid.train(
    {"seeds": [1, 2], "epochs": 5, "batch_size": 64},
    data={"train_samples": 4096, "validation_samples": 512, "test_samples": 1024,
          "calibration_images": 512},
)
print(outcome["data"])
print(outcome["backbone"])
for seed in outcome["seeds"]:
    print(f"seed {seed['seed']}: test accuracy {seed['test_accuracy']:.3f} "
          f"(best epoch {seed['best_epoch']}, losses {[round(l, 3) for l in seed['train_loss']]})")
