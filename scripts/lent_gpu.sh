# Sourced by the scripts that run on a lent GPU host (gpu_tier.sh, gpu_notebooks.sh): the lent machine returns
# only a few files, so each script collects what it writes in /tmp/NAME and this packs it into ONE file,
# $OUT/NAME.tgz, however the script ends.
#
#   . "$(dirname "$0")/lent_gpu.sh"; collect_in res      # then write under $R (= /tmp/res)
collect_in() {
    R=/tmp/$1
    rm -rf "$R"; mkdir -p "$R"
    trap "tar czf '${OUT:-/tmp}/$1.tgz' -C /tmp '$1'" EXIT
    # the GPU, its driver and the software versions, in $R/gpu.txt and on the command's output
    { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
      python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.backends.cudnn.version())"; } \
        > "$R/gpu.txt"
    cat "$R/gpu.txt"
}
