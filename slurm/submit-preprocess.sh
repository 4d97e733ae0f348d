#!/bin/bash
# submit-preprocess.sh TEMPLATE [SBATCH OPTIONS...]: submit templates/preprocess.sbatch as
# an array job of one task per line of $INPUTS, then its merge as a job that starts only
# when every task succeeded (afterok). Prints the two job ids. The template's variables
# (INPUTS, OUT, ...) come from the environment (exported) or the template's top.
set -euo pipefail
template=${1:?usage: submit-preprocess.sh TEMPLATE [SBATCH OPTIONS...]}
shift
inputs=${INPUTS:-$(sed -n 's/^INPUTS=\${INPUTS:-\([^}]*\)}.*/\1/p' "$template")}
[ -r "$inputs" ] || { echo "submit-preprocess: error: cannot read the input list '$inputs' (set INPUTS)" >&2; exit 4; }
n=$(grep -c . "$inputs")
[ "$n" -gt 0 ] || { echo "submit-preprocess: error: '$inputs' lists no input" >&2; exit 3; }
array=$(INPUTS=$inputs sbatch --parsable --export=ALL,INPUTS="$inputs" --array=0-$((n - 1)) "$@" "$template")
array=${array%%;*}
merge=$(sbatch --parsable --export=ALL,INPUTS="$inputs",MT_STAGE=merge --dependency=afterok:"$array" \
	--job-name=mt-merge --output="${MERGE_OUTPUT:-mt-merge-%j.out}" "$@" "$template")
merge=${merge%%;*}
echo "$array $merge"
