# The benchmark models, shared by the bench scripts (sourced, not run).
#   bench_config NAME SCRIPT: sets vocab seq hidden layers heads micro (the micro batch) and the
#   default def_iters def_warmup def_rounds; an unknown NAME ends SCRIPT with exit 2.
bench_config() {
  case $1 in
    tiny)  vocab=256   seq=128 hidden=128 layers=4 heads=4 micro=8; def_iters=40 def_warmup=5 def_rounds=7 ;;
    small) vocab=50304 seq=256 hidden=384 layers=6 heads=6 micro=4; def_iters=6  def_warmup=2 def_rounds=5 ;;
    *) echo "$2: config must be tiny or small, not $1" >&2; exit 2 ;;
  esac
}
