# bench/median.awk: the median the bench scripts' tables print, shared by them (awk -f bench/median.awk
# -f <the script's own program>). Each benchmark program prints lines "<key words...> <value>", one per
# figure per round; collect() files the value under the words before it, and med(key) is the median of
# what was filed under key over the rounds ("" when nothing was).
#   collect()     call it from a rule: { collect() }
#   med(key)      the median of values[key]
#   median(list)  the median of a space-separated list of numbers ("" for an empty list)

function collect(    key, i) {
  key = $1
  for (i = 2; i < NF; i++) key = key " " $i
  values[key] = values[key] " " $NF
}

function med(key) { return median(values[key]) }

# Insertion sort: a list is one value per round, a handful.
function median(list,    n, v, i, j, t) {
  n = split(list, v, " ")
  if (n == 0) return ""
  for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
