#pragma once
// Where the SiLU gate of the gated RMSNorm sits (gated_rmsnorm.h): after the norm (GLA, Gated DeltaNet) or before it
// (Mamba2). Its own header so that the GPU side names it without the CPU loops.
namespace canonlab {

enum class GateOrder { norm_then_gate, gate_then_norm };

}  // namespace canonlab
