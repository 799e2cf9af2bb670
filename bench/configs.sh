# The benchmark models and the machine, shared by the bench scripts (sourced, not run).
#   bench_config NAME SCRIPT: sets vocab seq hidden layers heads micro (the micro batch) and the
#   default def_iters def_warmup def_rounds; an unknown NAME ends SCRIPT with exit 2.
bench_config() {
  case $1 in
    tiny)  vocab=256   seq=128 hidden=128 layers=4 heads=4 micro=8; def_iters=40 def_warmup=5 def_rounds=7 ;;
    small) vocab=50304 seq=256 hidden=384 layers=6 heads=6 micro=4; def_iters=6  def_warmup=2 def_rounds=5 ;;
    *) echo "$2: config must be tiny or small, not $1" >&2; exit 2 ;;
  esac
}

# The GPT-2 model both sides train (bench/pytorch_train.py builds the same): the tanh GELU (GPT-2's
# gelu_new, Megatron's --openai-gelu) and no dropout, as llm.c and Hugging Face's GPT-2 train and as
# every row of bench/RESULTS.md before Megatron's defaults (erf GELU, dropout 0.1) came to tessel.
gpt2_bench_model=(--arch gpt2 --openai-gelu --hidden-dropout 0 --attention-dropout 0)

# lscpu's model name: every result names the CPU it was measured on.
cpu_model() { lscpu | sed -n 's/^Model name: *//p'; }

# pick_openblas_coretype THREADS WORKDIR: PyTorch at its best on this CPU for the whole script —
# OpenBLAS's fastest core type (bench/openblas_coretype.sh, its table printed here), exported as
# BENCH_OPENBLAS_CORETYPE for bench/run_pytorch.sh, measured once rather than every round.
pick_openblas_coretype() {
  "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh" "$1" >"$2/coretype" 2>"$2/coretype_table"
  cat "$2/coretype_table"
  BENCH_OPENBLAS_CORETYPE=$(tail -n 1 "$2/coretype")
  export BENCH_OPENBLAS_CORETYPE
}
