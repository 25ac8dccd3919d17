"""Cart-pole policy search with time-varying friction (Brunzema, von Rohr, Trimpe, CDC 2022).

`dynamics` is the pure model (numpy + scipy only): linearized plant, closed-loop cost, LQR optimum,
friction profiles and `CartPolePlant.evaluate(K, t)`; the protocol adapter lives in its own module.
"""
