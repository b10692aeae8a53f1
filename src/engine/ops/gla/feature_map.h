#pragma once
// GLA's feature map φ on q and k (gates.h). Its own header so that the GPU side names it without the CPU loops.
namespace canonlab {

enum class FeatureMap { none, elu_plus_one, relu, silu };

}  // namespace canonlab
