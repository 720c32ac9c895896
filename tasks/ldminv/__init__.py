"""ldminv: learnable matrix inverse (LD-Minv) and differentiable SVD (D-SVD), paper 000."""
