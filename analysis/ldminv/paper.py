"""The paper's reported numbers (spec section 3), as references to draw and compare against."""

from __future__ import annotations

# Fig. 1(a): log10 TestLoss of LD-Minv quoted in the text, keyed by (K, L).
FIG1_LD = {(7, 4): -1.0, (7, 9): -4.6, (2, 9): 0.32}

# Table 2: -log10 TestLoss, K = 4, L = 10.
KAPPAS = [1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 50.0, 100.0, 1000.0]
TABLE2_D = [7.64, 2.83, 2.49, 2.36, 2.30, 2.27, 2.26, 2.26, 2.25]
TABLE2_LD = [5.95, 5.01, 4.19, 3.62, 3.49, 3.30, 3.21, 3.22, 3.21]

# Table 3: D-SVD on 50x100 M, inner LD-Minv K = 6, L = 4.
K_SVD = [1, 5, 10, 20, 30, 40, 60]
TABLE3_INIT_LOSS = [44.9983, 35.8998, 26.6607, 15.6132, 10.3556, 7.7057, 5.0146]
TABLE3_INIT_MSE = [0.8782, 0.5721, 0.3373, 0.1502, 0.0879, 0.0568, 0.0274]
TABLE3_FINAL_LOSS = [23.1838, 0.9565, 0.4043, 0.2694, 0.2018, 0.1243, 0.0305]
TABLE3_FINAL_MSE = [0.2528, 0.0711, 0.0626, 0.0167, 0.0064, 0.0052, 0.0029]
