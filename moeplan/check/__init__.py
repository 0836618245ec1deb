"""`moeplan check`: read llama.cpp / ik_llama.cpp / llama-bench / KTransformers / SGLang output and
compare what the run really used and measured with a plan (parse.py pure text parsing,
placement.py the placement a log shows, compare.py predicted against observed)."""
