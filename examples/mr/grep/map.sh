#!/bin/sh
# grep's map, for `tabos mr run --arg PATTERN`: for each input record
# FILE<TAB>LINE whose line holds PATTERN (a plain byte string), the
# record FILE<TAB>1.
PATTERN="$1" LC_ALL=C exec awk -F '\t' \
    'index(substr($0, length($1) + 2), ENVIRON["PATTERN"]) { print $1 "\t1" }'
