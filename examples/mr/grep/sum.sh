#!/bin/sh
# grep's combine and reduce: each file's counts summed. The input is
# sorted by file, so one file's records are neighbours; the output is
# FILE<TAB>COUNT, as `tabos mr grep` writes it.
LC_ALL=C exec awk -F '\t' '
    NR > 1 && $1 != file { print file "\t" n; n = 0 }
    { file = $1; n += $2 }
    END { if (NR > 0) print file "\t" n }'
