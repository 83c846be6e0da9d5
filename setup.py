"""tvm-rl: reinforcement-learning graph rewriting and schedule tuning for Apache TVM."""
from setuptools import find_packages, setup

setup(
    name="tvm-rl",
    version="0.1.0",
    description="RL graph rewrites (X-RLflow) and PPO schedule tuning (CHAMELEON) for Apache TVM 0.27",
    packages=find_packages(include=["tvm_rl", "tvm_rl.*"]),
    # The shipped graph policy (RLRewritePass's default), made by the command in the README.
    package_data={"tvm_rl.graph": ["policies/*.pt"]},
    python_requires=">=3.10",
    install_requires=[
        # The TVM API moves between releases, and the newer FFI segfaults in tvm.ir.save_json,
        # which MetaSchedule calls on every tuning run: pin both.
        "apache-tvm==0.27.0.post1",
        "apache-tvm-ffi==0.1.14.post1",
        # A GPU user keeps their own CUDA torch; the Makefile installs the CPU 2.13.0 build first.
        "torch>=2.4",
        "numpy",
        "onnx",
        "onnxscript",
        "onnxruntime",
        "xgboost-cpu",
        "scikit-learn",
        "psutil",
        "cloudpickle",
        "gymnasium",
        "tqdm",
        "matplotlib",
        # TVM's RPC tracker (remote measurement, `tvm-rl tune --rpc-tracker`) imports tornado.
        "tornado",
    ],
    extras_require={"dev": ["pytest", "hypothesis", "pytest-timeout"]},
    entry_points={"console_scripts": ["tvm-rl=tvm_rl.cli:main"]},
)
