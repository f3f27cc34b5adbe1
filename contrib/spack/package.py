# contrib/spack/package.py - a Spack recipe for gridtrain.
#
# Copy it into a Spack repository of your own (docs/install.md):
#   spack repo create ~/spack-gridtrain
#   mkdir -p ~/spack-gridtrain/packages/gridtrain
#   cp contrib/spack/package.py ~/spack-gridtrain/packages/gridtrain/
#   spack repo add ~/spack-gridtrain
#   spack install gridtrain@main +cuda cuda_arch=90 +nccl ^mpich
#
# gridtrain has no public release yet: `git` below is a placeholder to point
# at the repository your site builds from, and the one version is the tip of
# its main branch. Release tarballs (make dist) would add url= and
# version("X.Y.Z", sha256=...) lines.
#
# The variants map onto configure's options (configure --help):
#   +cuda cuda_arch=A,B  --with-cuda=PREFIX --with-cudnn=PREFIX, nvcc code for sm_A, sm_B
#   +nccl                --with-nccl=PREFIX ([parallel] collectives = nccl; needs +cuda)
#   +sentencepiece       --with-sentencepiece (SentencePiece tokenizers; C++)
#   +onednn              --with-dnnl (bf16 matrix products on the CPU)
#   +plot                gridtrain plot: Python with matplotlib at run time (PYTHON=...)
# and each ~variant to --without-... so that nothing is picked up from the
# system by accident.

from spack.package import *


class Gridtrain(AutotoolsPackage, CudaPackage):
    """MPI-first training of neural networks in C: data, pipeline and tensor
    parallelism over MPI, parallel HDF5 datasets and checkpoints, and CPU
    (OpenBLAS, OpenMP) and CUDA (cuBLASLt, cuDNN, NCCL) back ends."""

    homepage = "https://example.org/gridtrain"  # placeholder: no public page yet
    git = "https://example.org/gridtrain.git"  # placeholder: your site's repository

    version("main", branch="main")

    variant("nccl", default=False, description="NCCL for the data-parallel collectives (+cuda)")
    variant("sentencepiece", default=False, description="SentencePiece tokenizers")
    variant("onednn", default=False, description="oneDNN bf16 matrix products on the CPU")
    variant("plot", default=True, description="gridtrain plot (Python with matplotlib)")

    conflicts("+nccl", when="~cuda", msg="NCCL collectives need the CUDA back end (+cuda)")

    # a git checkout has no configure script
    depends_on("autoconf", type="build")
    depends_on("automake", type="build")
    depends_on("libtool", type="build")
    depends_on("m4", type="build")
    depends_on("pkgconfig", type="build")
    depends_on("help2man", type="build")

    depends_on("mpi")
    depends_on("hdf5+mpi")
    depends_on("blas")
    depends_on("lapack")
    depends_on("inih")
    depends_on("json-c@0.15:")  # tokenizer.json (byte-level BPE)
    depends_on("pcre2")         # its pre-tokenizer regexes
    # CudaPackage adds cuda itself under +cuda
    depends_on("cudnn", when="+cuda")
    depends_on("nccl", when="+nccl")
    depends_on("sentencepiece", when="+sentencepiece")
    depends_on("onednn", when="+onednn")
    depends_on("python@3:", type="run", when="+plot")
    depends_on("py-matplotlib", type="run", when="+plot")
    depends_on("py-numpy", type="run", when="+plot")

    def autoreconf(self, spec, prefix):
        which("autoreconf")("--install", "--force", "--verbose")

    def setup_build_environment(self, env):
        spec = self.spec
        env.set("CC", spec["mpi"].mpicc)
        # configure looks for these through pkg-config under Debian's names
        # (hdf5-mpich, openblas); Spack's prefixes are given directly
        hdf5 = spec["hdf5"]
        env.set("HDF5_CFLAGS", hdf5.headers.include_flags)
        env.set("HDF5_LIBS", hdf5.libs.ld_flags)
        blas = spec["blas"]
        env.set("BLAS_CFLAGS", blas.headers.include_flags)
        env.set("BLAS_LIBS", (blas.libs + spec["lapack"].libs).ld_flags)

    def configure_args(self):
        spec = self.spec
        args = ["--disable-native"]  # Spack's compiler wrappers set the target
        if spec.satisfies("+cuda"):
            args.append("--with-cuda={0}".format(spec["cuda"].prefix))
            args.append("--with-cudnn={0}".format(spec["cudnn"].prefix))
            archs = spec.variants["cuda_arch"].value
            if archs and archs[0] != "none":
                gencode = " ".join(
                    "-gencode arch=compute_{0},code=sm_{0}".format(a) for a in archs
                )
                args.append("NVCCFLAGS=-O3 " + gencode)
        else:
            args.extend(["--without-cuda", "--without-cudnn"])
        if spec.satisfies("+nccl"):
            args.append("--with-nccl={0}".format(spec["nccl"].prefix))
        else:
            args.append("--without-nccl")
        args.append("--with-sentencepiece" if spec.satisfies("+sentencepiece")
                    else "--without-sentencepiece")
        args.append("--with-dnnl" if spec.satisfies("+onednn") else "--without-dnnl")
        if spec.satisfies("+plot"):
            args.append("PYTHON={0}".format(spec["python"].command.path))
        return args
